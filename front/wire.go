package main

// The wire format: a minimal protobuf reader. It is the first code to read
// KEDA's bytes on the public port, so it trusts nothing: every length is
// checked against what is left, every varint is bounded (encoding/binary
// rejects overlong and overflowing ones), and any malformed or unusual input
// makes the call uncacheable: it is forwarded, and the scaler itself answers.

import (
	"bytes"
	"encoding/binary"
)

// field is one protobuf field: for wire type 0 the varint is in num64, for
// wire type 2 the bytes are in data.
type field struct {
	num   int
	wt    int
	num64 uint64
	data  []byte
}

// fields splits a protobuf message; false on malformed input.
func fields(b []byte, fn func(f field) bool) bool {
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return false
		}
		b = b[n:]
		f := field{num: int(tag >> 3), wt: int(tag & 7)}
		switch f.wt {
		case 0:
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return false
			}
			f.num64, b = v, b[n:]
		case 1:
			if len(b) < 8 {
				return false
			}
			f.num64, b = binary.LittleEndian.Uint64(b), b[8:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return false
			}
			f.data, b = b[n:n+int(l)], b[n+int(l):]
		case 5:
			if len(b) < 4 {
				return false
			}
			f.num64, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		default:
			return false
		}
		if !fn(f) {
			return false
		}
	}
	return true
}

func appendPart(key []byte, part []byte) []byte {
	key = binary.AppendUvarint(key, uint64(len(part)))
	return append(key, part...)
}

type kv struct{ k, v []byte }

// refKey is a canonical key of a ScaledObjectRef: name, namespace and the
// metadata entries sorted by key. Anything unusual (unknown or repeated
// fields, duplicate metadata keys) is not cacheable: such calls are always
// forwarded, so the scaler alone decides what they mean.
func refKey(b []byte, key []byte) ([]byte, bool) {
	var name, namespace []byte
	seenName, seenNamespace := false, false
	var buf [32]kv // KEDA's metadata has a handful of keys: no allocation
	entries := buf[:0]
	ok := fields(b, func(f field) bool {
		if f.wt != 2 {
			return false
		}
		switch f.num {
		case 1:
			if seenName {
				return false
			}
			name, seenName = f.data, true
		case 2:
			if seenNamespace {
				return false
			}
			namespace, seenNamespace = f.data, true
		case 3:
			var e kv
			var k, v bool
			if !fields(f.data, func(g field) bool {
				if g.wt != 2 || (g.num == 1 && k) || (g.num == 2 && v) {
					return false
				}
				switch g.num {
				case 1:
					e.k, k = g.data, true
				case 2:
					e.v, v = g.data, true
				default:
					return false
				}
				return true
			}) {
				return false
			}
			entries = append(entries, e)
		default:
			return false
		}
		return true
	})
	if !ok {
		return nil, false
	}
	for i := 1; i < len(entries); i++ { // insertion sort: few keys, no allocation
		for j := i; j > 0 && bytes.Compare(entries[j].k, entries[j-1].k) < 0; j-- {
			entries[j], entries[j-1] = entries[j-1], entries[j]
		}
	}
	for i := 1; i < len(entries); i++ {
		if bytes.Equal(entries[i].k, entries[i-1].k) {
			return nil, false
		}
	}
	key = appendPart(key, name)
	key = appendPart(key, namespace)
	key = binary.AppendUvarint(key, uint64(len(entries)))
	for _, e := range entries {
		key = appendPart(key, e.k)
		key = appendPart(key, e.v)
	}
	return key, true
}

// requestKey is the canonical cache key of one call, or false if the call
// must be forwarded.
func requestKey(method string, req []byte, scratch []byte) ([]byte, bool) {
	key := append(scratch[:0], method...)
	key = append(key, 0)
	switch method {
	case mGetMetricSpec, mIsActive:
		return refKey(req, key)
	case mGetMetrics:
		var ref, metric []byte
		seenRef, seenMetric := false, false
		if !fields(req, func(f field) bool {
			if f.wt != 2 {
				return false
			}
			switch {
			case f.num == 1 && !seenRef:
				ref, seenRef = f.data, true
			case f.num == 2 && !seenMetric:
				metric, seenMetric = f.data, true
			default:
				return false
			}
			return true
		}) || !seenRef {
			return nil, false
		}
		key = appendPart(key, metric)
		return refKey(ref, key)
	}
	return nil, false
}
