package main

// Tests of the wire parser (wire.go): it reads KEDA's bytes before anything
// else does, so every malformed shape must be refused without a panic, and
// every well-formed request must get the same cache key as any other
// encoding of the same ScaledObjectRef (keda.sh external scaler docs;
// protos/externalscaler.proto; protobuf encoding spec, protobuf.dev).
//
// The reference for "what the bytes mean" is grpc-go's own protobuf library
// (github.com/golang/protobuf, the one Debian's grpc-go is built with): its
// low-level decoder for the field walk, and its reflection-driven
// Unmarshal/Marshal for the message shapes.

import (
	"bytes"
	"encoding/binary"
	"math"
	"reflect"
	"sort"
	"testing"

	"github.com/golang/protobuf/proto"
)

// ---------------------------------------------------------------- messages

// scaledObjectRef is externalscaler.ScaledObjectRef, declared by struct tags
// for golang/protobuf. Strings are bytes here (same wire encoding) and the
// tags omit proto3, so the reference never rejects invalid UTF-8: the front
// keys raw bytes and leaves validation to the scaler.
type scaledObjectRef struct {
	Name             []byte            `protobuf:"bytes,1,opt,name=name"`
	Namespace        []byte            `protobuf:"bytes,2,opt,name=namespace"`
	ScalerMetadata   map[string][]byte `protobuf:"bytes,3,rep,name=scalerMetadata" protobuf_key:"bytes,1,opt,name=key" protobuf_val:"bytes,2,opt,name=value"`
	XXX_unrecognized []byte
}

func (m *scaledObjectRef) Reset()         { *m = scaledObjectRef{} }
func (m *scaledObjectRef) String() string { return proto.CompactTextString(m) }
func (*scaledObjectRef) ProtoMessage()    {}

// getMetricsRequest is externalscaler.GetMetricsRequest.
type getMetricsRequest struct {
	ScaledObjectRef  *scaledObjectRef `protobuf:"bytes,1,opt,name=scaledObjectRef"`
	MetricName       []byte           `protobuf:"bytes,2,opt,name=metricName"`
	XXX_unrecognized []byte
}

func (m *getMetricsRequest) Reset()         { *m = getMetricsRequest{} }
func (m *getMetricsRequest) String() string { return proto.CompactTextString(m) }
func (*getMetricsRequest) ProtoMessage()    {}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatalf("marshal %v: %v", m, err)
	}
	return b
}

// ---------------------------------------------------------------- hand encoding

func tag(num uint64, wt uint64) []byte { return binary.AppendUvarint(nil, num<<3|wt) }

func varintField(num, v uint64) []byte { return binary.AppendUvarint(tag(num, 0), v) }

func bytesField(num uint64, data []byte) []byte {
	return append(binary.AppendUvarint(tag(num, 2), uint64(len(data))), data...)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func entry(k, v string) []byte {
	return bytesField(3, cat(bytesField(1, []byte(k)), bytesField(2, []byte(v))))
}

func ref(name, namespace string, entries ...[]byte) []byte {
	return cat(append([][]byte{bytesField(1, []byte(name)), bytesField(2, []byte(namespace))}, entries...)...)
}

func metricsReq(refBytes []byte, metric string) []byte {
	return cat(bytesField(1, refBytes), bytesField(2, []byte(metric)))
}

// ---------------------------------------------------------------- references

// refField is what the reference decoder saw: the numbers and the raw value.
type refField struct {
	num, wt int
	num64   uint64
	data    []byte
}

// overflows is the one check golang/protobuf's varint decoder lacks and the
// protobuf spec requires (google.golang.org/protobuf's protowire has it): a
// tenth byte above 1 does not fit in 64 bits.
func overflows(b []byte, n int) bool { return n == binary.MaxVarintLen64 && b[n-1] > 1 }

// referenceFields walks a message with golang/protobuf's decoder.
func referenceFields(b []byte) ([]refField, bool) {
	var out []refField
	varint := func() (uint64, bool) {
		v, n := proto.DecodeVarint(b)
		if n == 0 || overflows(b, n) {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	for len(b) > 0 {
		t, ok := varint()
		if !ok {
			return nil, false
		}
		f := refField{num: int(t >> 3), wt: int(t & 7)}
		var err error
		switch f.wt {
		case 0:
			f.num64, ok = varint()
		case 1:
			f.num64, err = proto.NewBuffer(b).DecodeFixed64()
			if err == nil {
				b = b[8:]
			}
		case 2:
			if _, n := proto.DecodeVarint(b); n == 0 || overflows(b, n) {
				return nil, false
			} else if f.data, err = proto.NewBuffer(b).DecodeRawBytes(false); err == nil {
				b = b[n+len(f.data):]
			}
		case 5:
			f.num64, err = proto.NewBuffer(b).DecodeFixed32()
			if err == nil {
				b = b[4:]
			}
		default:
			ok = false
		}
		if !ok || err != nil {
			return nil, false
		}
		out = append(out, f)
	}
	return out, true
}

func parsedFields(b []byte) ([]refField, bool) {
	var out []refField
	ok := fields(b, func(f field) bool {
		out = append(out, refField{num: f.num, wt: f.wt, num64: f.num64, data: f.data})
		return true
	})
	if !ok {
		return nil, false
	}
	return out, true
}

// decodedKey is a cache key read back: requestKey's output is a sequence of
// length-prefixed parts, so it can be decoded, which proves it injective.
type decodedKey struct {
	method, metric, name, namespace string
	entries                         [][2]string
}

func decodeKey(t testing.TB, key []byte) decodedKey {
	t.Helper()
	var d decodedKey
	i := bytes.IndexByte(key, 0)
	if i < 0 {
		t.Fatalf("key %q has no method terminator", key)
	}
	d.method, key = string(key[:i]), key[i+1:]
	part := func() string {
		l, n := binary.Uvarint(key)
		if n <= 0 || l > uint64(len(key)-n) {
			t.Fatalf("key part truncated: %q", key)
		}
		s := string(key[n : n+int(l)])
		key = key[n+int(l):]
		return s
	}
	if d.method == mGetMetrics {
		d.metric = part()
	}
	d.name, d.namespace = part(), part()
	count, n := binary.Uvarint(key)
	if n <= 0 {
		t.Fatalf("key entry count truncated")
	}
	key = key[n:]
	for i := uint64(0); i < count; i++ {
		d.entries = append(d.entries, [2]string{part(), part()})
	}
	if len(key) != 0 {
		t.Fatalf("key has %d trailing bytes", len(key))
	}
	return d
}

// expectedKey is what the key must say about a reference-decoded request.
func expectedKey(method string, m *scaledObjectRef, metric []byte) decodedKey {
	d := decodedKey{method: method, metric: string(metric), name: string(m.Name), namespace: string(m.Namespace)}
	for k, v := range m.ScalerMetadata {
		d.entries = append(d.entries, [2]string{k, string(v)})
	}
	sort.Slice(d.entries, func(i, j int) bool { return d.entries[i][0] < d.entries[j][0] })
	return d
}

func sameKey(a, b decodedKey) bool {
	if len(a.entries) == 0 && len(b.entries) == 0 {
		a.entries, b.entries = nil, nil
	}
	return reflect.DeepEqual(a, b)
}

// checkAgainstReference: a request the front would cache must mean, to
// golang/protobuf, exactly what its key says, with nothing left unread; and
// the reference's own re-encoding (a different map order, maybe different
// varints) must map to the same key.
func checkAgainstReference(t *testing.T, method string, req []byte) {
	key, ok := requestKey(method, req, nil)
	if !ok {
		return
	}
	got := decodeKey(t, key)
	var m scaledObjectRef
	var metric []byte
	var again []byte
	if method == mGetMetrics {
		var gm getMetricsRequest
		if err := proto.Unmarshal(req, &gm); err != nil {
			t.Fatalf("front caches %x, golang/protobuf rejects it: %v", req, err)
		}
		if len(gm.XXX_unrecognized) > 0 || gm.ScaledObjectRef == nil {
			t.Fatalf("front caches %x with unknown fields or no ref", req)
		}
		m, metric = *gm.ScaledObjectRef, gm.MetricName
		again = marshal(t, &gm)
	} else {
		if err := proto.Unmarshal(req, &m); err != nil {
			t.Fatalf("front caches %x, golang/protobuf rejects it: %v", req, err)
		}
		again = marshal(t, &m)
	}
	if len(m.XXX_unrecognized) > 0 {
		t.Fatalf("front caches %x with unknown fields", req)
	}
	if want := expectedKey(method, &m, metric); !sameKey(got, want) {
		t.Fatalf("key of %x says %+v, golang/protobuf reads %+v", req, got, want)
	}
	key2, ok := requestKey(method, again, nil)
	if !ok || !bytes.Equal(key, key2) {
		t.Fatalf("re-encoded request %x keys differently (%v): %q vs %q", again, ok, key2, key)
	}
}

// ---------------------------------------------------------------- fields

func TestFieldsWalksEveryWireType(t *testing.T) {
	// Rule: the four wire types proto3 uses (varint 0, fixed64 1, bytes 2,
	// fixed32 5) are each consumed exactly, whatever the field number
	// (protobuf.dev encoding spec).
	b := cat(
		varintField(1, 150),
		tag(2, 1), binary.LittleEndian.AppendUint64(nil, math.Float64bits(2.5)),
		bytesField(3, []byte("abc")),
		tag(4, 5), binary.LittleEndian.AppendUint32(nil, 7),
		varintField(536870911, math.MaxUint64), // largest field number, largest varint
		bytesField(6, nil),
	)
	got, ok := parsedFields(b)
	if !ok {
		t.Fatal("valid message refused")
	}
	want := []refField{
		{num: 1, wt: 0, num64: 150},
		{num: 2, wt: 1, num64: math.Float64bits(2.5)},
		{num: 3, wt: 2, data: []byte("abc")},
		{num: 4, wt: 5, num64: 7},
		{num: 536870911, wt: 0, num64: math.MaxUint64},
		{num: 6, wt: 2, data: []byte{}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if ref, ok := referenceFields(b); !ok || !reflect.DeepEqual(ref, want) {
		t.Fatalf("reference disagrees: %v %+v", ok, ref)
	}
	if got, ok := parsedFields(nil); !ok || len(got) != 0 {
		t.Fatal("the empty message is valid and has no fields")
	}
}

func TestFieldsRefusesMalformedInput(t *testing.T) {
	// Rule: truncated varints, overlong or overflowing varints, fixed
	// values cut short, lengths past the end (however large), and wire
	// types proto3 never sends (groups 3/4, and 6/7, which do not exist)
	// are malformed: the walk stops with false, never reads out of bounds.
	overflow := append(bytes.Repeat([]byte{0xff}, 9), 0x02)
	cases := map[string][]byte{
		"truncated tag":              {0x80},
		"truncated varint value":     {0x08, 0x80},
		"varint value missing":       {0x08},
		"eleven-byte varint":         append([]byte{0x08}, append(bytes.Repeat([]byte{0x80}, 10), 0x01)...),
		"varint overflows 64 bits":   append([]byte{0x08}, overflow...),
		"tag overflows 64 bits":      overflow,
		"fixed64 short":              append(tag(1, 1), 1, 2, 3, 4, 5, 6, 7),
		"fixed32 short":              append(tag(1, 5), 1, 2, 3),
		"length past the end":        append(tag(1, 2), 5, 'a', 'b'),
		"length missing":             tag(1, 2),
		"length truncated varint":    append(tag(1, 2), 0x80),
		"length 2^63":                binary.AppendUvarint(tag(1, 2), 1<<63),
		"length 2^64-1":              binary.AppendUvarint(tag(1, 2), math.MaxUint64),
		"length int overflow bait":   binary.AppendUvarint(tag(1, 2), math.MaxInt64),
		"start group":                tag(1, 3),
		"end group":                  tag(1, 4),
		"wire type 6":                tag(1, 6),
		"wire type 7":                tag(1, 7),
		"good field then truncation": append(varintField(1, 1), 0x10),
	}
	for name, b := range cases {
		if got, ok := parsedFields(b); ok {
			t.Errorf("%s: %x accepted as %+v", name, b, got)
		}
		if _, ok := referenceFields(b); ok {
			t.Errorf("%s: %x is valid to golang/protobuf: the case is wrong", name, b)
		}
	}
}

func TestFieldsStopsWhenTheCallbackRefuses(t *testing.T) {
	// Rule: a visitor that refuses a field ends the walk with false, so a
	// caller's "unusual field" verdict cannot be lost.
	calls := 0
	ok := fields(cat(varintField(1, 1), varintField(2, 2)), func(field) bool { calls++; return false })
	if ok || calls != 1 {
		t.Fatalf("ok=%v after %d calls", ok, calls)
	}
}

// ---------------------------------------------------------------- request keys

func TestRequestKeyOfValidRequests(t *testing.T) {
	// Rule: KEDA's three polled calls carry a ScaledObjectRef (IsActive,
	// GetMetricSpec) or a GetMetricsRequest wrapping one (keda.sh external
	// scaler docs); a well-formed one is cacheable, and its key says
	// exactly which object, metric and metadata it names.
	m := &scaledObjectRef{Name: []byte("llm"), Namespace: []byte("prod"),
		ScalerMetadata: map[string][]byte{"b": []byte("2"), "a": []byte("1"), "": []byte("")}}
	for _, method := range []string{mIsActive, mGetMetricSpec} {
		checkAgainstReference(t, method, marshal(t, m))
		if _, ok := requestKey(method, marshal(t, m), nil); !ok {
			t.Fatalf("%s: valid ref refused", method)
		}
	}
	gm := &getMetricsRequest{ScaledObjectRef: m, MetricName: []byte("prescaler-llm")}
	key, ok := requestKey(mGetMetrics, marshal(t, gm), nil)
	if !ok {
		t.Fatal("valid GetMetricsRequest refused")
	}
	checkAgainstReference(t, mGetMetrics, marshal(t, gm))
	want := decodedKey{method: mGetMetrics, metric: "prescaler-llm", name: "llm", namespace: "prod",
		entries: [][2]string{{"", ""}, {"a", "1"}, {"b", "2"}}}
	if got := decodeKey(t, key); !sameKey(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	// Empty fields are omitted on the wire (proto3): an empty ref is valid.
	if _, ok := requestKey(mIsActive, nil, nil); !ok {
		t.Fatal("the empty ScaledObjectRef is valid")
	}
	// A GetMetricsRequest whose ref is present but empty is valid too.
	if _, ok := requestKey(mGetMetrics, bytesField(1, nil), nil); !ok {
		t.Fatal("GetMetricsRequest with an empty ref refused")
	}
}

func TestRequestKeyIsCanonical(t *testing.T) {
	// Rule: Go's protobuf (KEDA is Go) marshals map entries in random order
	// and may put fields in any order; every encoding of the same request
	// must hit the same cache entry.
	a := ref("llm", "prod", entry("a", "1"), entry("b", "2"), entry("c", "3"))
	b := cat(entry("c", "3"), bytesField(2, []byte("prod")), entry("a", "1"),
		bytesField(1, []byte("llm")), entry("b", "2"))
	// A non-minimal varint length (0x83 0x00 = 3) is still valid protobuf.
	c := cat(tag(1, 2), []byte{0x83, 0x00}, []byte("llm"), bytesField(2, []byte("prod")),
		entry("b", "2"), entry("c", "3"), entry("a", "1"))
	for _, method := range []string{mIsActive, mGetMetricSpec} {
		ka, _ := requestKey(method, a, nil)
		for i, other := range [][]byte{b, c} {
			k, ok := requestKey(method, other, nil)
			if !ok || !bytes.Equal(k, ka) {
				t.Fatalf("%s: encoding %d keys as %q, want %q", method, i, k, ka)
			}
		}
	}
	ka, _ := requestKey(mGetMetrics, metricsReq(a, "m"), nil)
	kb, _ := requestKey(mGetMetrics, cat(bytesField(2, []byte("m")), bytesField(1, b)), nil)
	if !bytes.Equal(ka, kb) {
		t.Fatal("GetMetricsRequest field order changes its key")
	}
}

func TestRequestKeyTellsRequestsApart(t *testing.T) {
	// Rule: two different requests never share a key (a shared key would
	// answer one object with another's replica count): parts are length
	// prefixed, so no concatenation can collide, and the method is part of
	// the key.
	base := ref("ab", "c", entry("k", "v"))
	variants := [][]byte{
		ref("a", "bc", entry("k", "v")),
		ref("ab", "c", entry("kv", "")),
		ref("ab", "c", entry("k", "v"), entry("", "")),
		ref("ab", "c"),
		ref("ab", "c", entry("k", "w")),
	}
	kb, _ := requestKey(mIsActive, base, nil)
	for i, v := range variants {
		if k, _ := requestKey(mIsActive, v, nil); bytes.Equal(k, kb) {
			t.Fatalf("variant %d shares a key with the base", i)
		}
	}
	if k, _ := requestKey(mGetMetricSpec, base, nil); bytes.Equal(k, kb) {
		t.Fatal("two methods share a key")
	}
	k1, _ := requestKey(mGetMetrics, metricsReq(base, "m1"), nil)
	k2, _ := requestKey(mGetMetrics, metricsReq(base, "m2"), nil)
	if bytes.Equal(k1, k2) {
		t.Fatal("two metric names share a key")
	}
}

func TestRequestKeyForwardsAnythingUnusual(t *testing.T) {
	// Rule: the front holds no protobuf semantics beyond the happy path.
	// Unknown fields (skipped over correctly, never misread as known ones),
	// repeated singular fields, duplicate map keys, wrong wire types and
	// malformed nested messages make a call uncacheable, so it is forwarded
	// and the scaler answers (or rejects) it itself.
	good := ref("llm", "prod", entry("a", "1"))
	refCases := map[string][]byte{
		"unknown bytes field":         cat(good, bytesField(4, []byte("x"))),
		"unknown varint field":        cat(varintField(9, 1), good),
		"unknown fixed32 field":       cat(good, tag(7, 5), []byte{1, 2, 3, 4}),
		"field number 0":              cat(bytesField(0, nil), good),
		"name as varint":              cat(varintField(1, 3), bytesField(2, []byte("prod"))),
		"namespace as fixed64":        cat(bytesField(1, []byte("llm")), tag(2, 1), make([]byte, 8)),
		"metadata as varint":          cat(good, varintField(3, 1)),
		"repeated name":               cat(good, bytesField(1, []byte("other"))),
		"repeated namespace":          cat(good, bytesField(2, []byte("prod"))),
		"duplicate metadata key":      cat(good, entry("a", "2")),
		"entry with unknown field":    cat(good, bytesField(3, cat(bytesField(1, []byte("k")), bytesField(3, nil)))),
		"entry key as varint":         cat(good, bytesField(3, varintField(1, 5))),
		"entry with two keys":         cat(good, bytesField(3, cat(bytesField(1, []byte("k")), bytesField(1, []byte("j"))))),
		"entry with two values":       cat(good, bytesField(3, cat(bytesField(2, []byte("k")), bytesField(2, []byte("j"))))),
		"entry truncated inside":      cat(good, bytesField(3, []byte{0x0a, 0x05, 'a'})),
		"entry length past the end":   cat(good, tag(3, 2), []byte{0x10, 0x0a}),
		"truncated after good fields": cat(good, []byte{0x0a}),
		"group wire type":             cat(good, tag(5, 3)),
	}
	for name, b := range refCases {
		for _, method := range []string{mIsActive, mGetMetricSpec} {
			if k, ok := requestKey(method, b, nil); ok {
				t.Errorf("%s %s: %x cached as %q", method, name, b, k)
			}
		}
		if k, ok := requestKey(mGetMetrics, metricsReq(b, "m"), nil); ok {
			t.Errorf("GetMetrics %s: nested %x cached as %q", name, b, k)
		}
	}
	metricsCases := map[string][]byte{
		"no ref":             bytesField(2, []byte("m")),
		"repeated ref":       cat(metricsReq(good, "m"), bytesField(1, good)),
		"repeated metric":    cat(metricsReq(good, "m"), bytesField(2, []byte("m"))),
		"unknown field":      cat(metricsReq(good, "m"), varintField(3, 1)),
		"ref as varint":      cat(varintField(1, 1), bytesField(2, []byte("m"))),
		"ref length too big": cat(tag(1, 2), binary.AppendUvarint(nil, uint64(len(good)+1)), good),
	}
	for name, b := range metricsCases {
		if k, ok := requestKey(mGetMetrics, b, nil); ok {
			t.Errorf("GetMetrics %s: %x cached as %q", name, b, k)
		}
	}
	for _, method := range []string{mWatch, mReport, scalerService + "StreamIsActive", "", "/x"} {
		if _, ok := requestKey(method, good, nil); ok {
			t.Errorf("%q is not a polled call, yet it is cacheable", method)
		}
	}
}

func TestRequestKeyHandlesManyEntries(t *testing.T) {
	// Rule: KEDA's metadata usually has a handful of keys and the parser
	// keeps up to 32 on the stack; more must still work (the slice grows).
	var entries [][]byte
	for i := 0; i < 100; i++ {
		entries = append(entries, entry(string(rune('a'+i%26))+string(rune('0'+i/26)), "v"))
	}
	b := ref("llm", "prod", entries...)
	key, ok := requestKey(mIsActive, b, nil)
	if !ok {
		t.Fatal("100 entries refused")
	}
	if d := decodeKey(t, key); len(d.entries) != 100 {
		t.Fatalf("key holds %d entries", len(d.entries))
	}
	checkAgainstReference(t, mIsActive, b)
}

// ---------------------------------------------------------------- fuzz

// wireSeeds are inputs that reach every branch: valid requests, each kind
// of truncation, every wire type, and a large length.
func wireSeeds() [][]byte {
	good := ref("llm", "prod", entry("a", "1"), entry("b", "2"))
	return [][]byte{
		nil,
		good,
		metricsReq(good, "prescaler-llm"),
		cat(good, bytesField(4, []byte("x")), tag(7, 5), []byte{1, 2, 3, 4}, tag(8, 1), make([]byte, 8)),
		cat(good, entry("a", "3")),
		{0x80},
		append([]byte{0x08}, bytes.Repeat([]byte{0xff}, 10)...),
		binary.AppendUvarint(tag(1, 2), math.MaxUint64),
		tag(1, 3),
		bytesField(1, bytesField(3, []byte{0x0a, 0x05})),
	}
}

func FuzzFields(f *testing.F) {
	// Rule: on any input the walk agrees with golang/protobuf's decoder
	// (plus the spec's overflow check): same verdict, same fields, same
	// values; it never panics or reads past the input.
	for _, s := range wireSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := parsedFields(b)
		want, wantOK := referenceFields(b)
		if ok != wantOK || !reflect.DeepEqual(got, want) {
			t.Fatalf("%x: front (%v) %+v, golang/protobuf (%v) %+v", b, ok, got, wantOK, want)
		}
	})
}

func FuzzRequestKey(f *testing.F) {
	// Rule: for any bytes on any polled method, requestKey never panics,
	// and a key it hands out means to golang/protobuf exactly what it says
	// (no unknown field, no lost entry) and is shared by every re-encoding.
	for _, s := range wireSeeds() {
		for m := uint8(0); m < 3; m++ {
			f.Add(m, s)
		}
	}
	methods := []string{mIsActive, mGetMetricSpec, mGetMetrics}
	f.Fuzz(func(t *testing.T, m uint8, b []byte) {
		checkAgainstReference(t, methods[int(m)%len(methods)], b)
	})
}

func FuzzRequestKeyRoundTrip(f *testing.F) {
	// Rule: every request golang/protobuf can encode (any bytes in any
	// field, any map) is cacheable, decodes to itself, and keys the same
	// whatever the map order on the wire.
	f.Add("llm", "prod", "prescaler-llm", "a", "1", "b", "2")
	f.Add("", "", "", "", "", "", "")
	f.Add("\xff\x00", "ns", "m", "k", "", "k2", "\x80")
	f.Fuzz(func(t *testing.T, name, namespace, metric, k1, v1, k2, v2 string) {
		m := &scaledObjectRef{Name: []byte(name), Namespace: []byte(namespace),
			ScalerMetadata: map[string][]byte{k1: []byte(v1), k2: []byte(v2)}}
		gm := &getMetricsRequest{ScaledObjectRef: m, MetricName: []byte(metric)}
		for _, c := range []struct {
			method string
			req    []byte
		}{{mIsActive, marshal(t, m)}, {mGetMetrics, marshal(t, gm)}} {
			key, ok := requestKey(c.method, c.req, nil)
			if !ok {
				t.Fatalf("%s: %x refused", c.method, c.req)
			}
			if got, want := decodeKey(t, key), expectedKey(c.method, m, gm.MetricName); c.method == mGetMetrics && !sameKey(got, want) {
				t.Fatalf("got %+v, want %+v", got, want)
			} else if c.method == mIsActive {
				want.metric = ""
				if !sameKey(got, want) {
					t.Fatalf("got %+v, want %+v", got, want)
				}
			}
		}
		// The same ref with its entries in the opposite order, by hand.
		var fwd, rev [][]byte
		keys := []string{k1, k2}
		if k1 == k2 {
			keys = keys[:1]
		}
		for _, k := range keys {
			fwd = append(fwd, entry(k, string(m.ScalerMetadata[k])))
		}
		for i := len(fwd) - 1; i >= 0; i-- {
			rev = append(rev, fwd[i])
		}
		ka, okA := requestKey(mIsActive, ref(name, namespace, fwd...), nil)
		kb, okB := requestKey(mIsActive, ref(name, namespace, rev...), nil)
		kc, _ := requestKey(mIsActive, marshal(t, m), nil)
		if !okA || !okB || !bytes.Equal(ka, kb) || !bytes.Equal(ka, kc) {
			t.Fatalf("map order changes the key: %q %q %q", ka, kb, kc)
		}
	})
}
