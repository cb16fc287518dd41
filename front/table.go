package main

// The table of answers the Python scaler publishes (Front/Watch).

import (
	"encoding/binary"
	"errors"
	"sync"
)

type answer struct {
	ready      bool
	getMetrics []byte
	isActive   []byte
}

// table maps canonical requests to object ids and ids to their answers.
type table struct {
	mu      sync.RWMutex
	spec    []byte
	answers map[uint64]answer
	keys    map[string]uint64
	byID    map[uint64][]string
}

func newTable() *table {
	return &table{answers: map[uint64]answer{}, keys: map[string]uint64{}, byID: map[uint64][]string{}}
}

func (t *table) lookup(method string, key []byte) ([]byte, uint64, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	id, ok := t.keys[string(key)] // no allocation: the compiler indexes with the bytes
	if !ok {
		return nil, 0, false
	}
	a, ok := t.answers[id]
	if !ok {
		return nil, 0, false
	}
	switch method {
	case mGetMetricSpec:
		if t.spec != nil {
			return t.spec, id, true
		}
	case mGetMetrics:
		if a.ready {
			return a.getMetrics, id, true
		}
	case mIsActive:
		if a.ready {
			return a.isActive, id, true
		}
	}
	return nil, 0, false
}

func (t *table) learn(keyBytes []byte, id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.keys[string(keyBytes)]; ok && old == id {
		return
	}
	key := string(keyBytes)
	if len(t.keys) >= maxKeys { // bounded: forget every mapping, relearn on the next calls
		t.keys, t.byID = map[string]uint64{}, map[uint64][]string{}
	}
	t.keys[key] = id
	t.byID[id] = append(t.byID[id], key)
}

func (t *table) clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.spec = nil
	t.answers = map[uint64]answer{}
}

// apply decodes one TableUpdate (protos/front.proto) into the table.
func (t *table) apply(msg []byte) error {
	var (
		reset   bool
		spec    []byte
		answers = map[uint64]answer{}
		removed []uint64
	)
	ok := fields(msg, func(f field) bool {
		switch {
		case f.num == 1 && f.wt == 0:
			reset = f.num64 != 0
		case f.num == 2 && f.wt == 2:
			spec = f.data
		case f.num == 3 && f.wt == 2:
			var id uint64
			var a answer
			if !fields(f.data, func(g field) bool {
				switch {
				case g.num == 1 && g.wt == 0:
					id = g.num64
				case g.num == 2 && g.wt == 0:
					a.ready = g.num64 != 0
				case g.num == 3 && g.wt == 2:
					a.getMetrics = g.data
				case g.num == 4 && g.wt == 2:
					a.isActive = g.data
				}
				return true
			}) {
				return false
			}
			answers[id] = a
		case f.num == 4 && f.wt == 0:
			removed = append(removed, f.num64)
		case f.num == 4 && f.wt == 2:
			for b := f.data; len(b) > 0; {
				v, n := binary.Uvarint(b)
				if n <= 0 {
					return false
				}
				removed, b = append(removed, v), b[n:]
			}
		}
		return true
	})
	if !ok {
		return errors.New("malformed TableUpdate")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if reset {
		t.answers = map[uint64]answer{}
	}
	if spec != nil {
		t.spec = spec
	}
	for id, a := range answers {
		t.answers[id] = a
	}
	for _, id := range removed {
		delete(t.answers, id)
		for _, k := range t.byID[id] {
			if t.keys[k] == id {
				delete(t.keys, k)
			}
		}
		delete(t.byID, id)
	}
	return nil
}
