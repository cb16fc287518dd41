package main

// Tests of the answer table (table.go): how a TableUpdate from the scaler
// (protos/front.proto, streamed by Front/Watch) lands, and how learned keys
// find their answers.

import (
	"bytes"
	"reflect"
	"testing"
)

func answerMsg(id uint64, ready bool, getMetrics, isActive string) []byte {
	r := uint64(0)
	if ready {
		r = 1
	}
	return bytesField(3, cat(varintField(1, id), varintField(2, r),
		bytesField(3, []byte(getMetrics)), bytesField(4, []byte(isActive))))
}

// snapshot copies what a table holds, to compare before and after.
func snapshot(t *table) (spec []byte, answers map[uint64]answer, keys map[string]uint64) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	answers, keys = map[uint64]answer{}, map[string]uint64{}
	for id, a := range t.answers {
		answers[id] = a
	}
	for k, id := range t.keys {
		keys[k] = id
	}
	return append([]byte(nil), t.spec...), answers, keys
}

func TestTableApplyAnswersLearnedRequests(t *testing.T) {
	// Rule: an object's answers are served once its id is both published
	// (TableUpdate.answers, ready) and learned from a forwarded call's
	// trailer; GetMetricSpec's answer is shared by every object.
	tb := newTable()
	update := cat(varintField(1, 0), bytesField(2, []byte("SPEC")),
		answerMsg(7, true, "GM7", "IA7"), answerMsg(8, false, "", ""))
	if err := tb.apply(update); err != nil {
		t.Fatal(err)
	}
	req := ref("llm", "prod", entry("a", "1"))
	for method, want := range map[string]string{mIsActive: "IA7", mGetMetricSpec: "SPEC"} {
		key, _ := requestKey(method, req, nil)
		if _, _, ok := tb.lookup(method, key); ok {
			t.Fatalf("%s answered before its key was learned", method)
		}
		tb.learn(key, 7)
		got, id, ok := tb.lookup(method, key)
		if !ok || id != 7 || string(got) != want {
			t.Fatalf("%s: %q %d %v", method, got, id, ok)
		}
	}
	key, _ := requestKey(mGetMetrics, metricsReq(req, "m"), nil)
	tb.learn(key, 8)
	if _, _, ok := tb.lookup(mGetMetrics, key); ok {
		t.Fatal("an answer that is not ready was served")
	}
}

func TestTableApplySkipsUnknownFields(t *testing.T) {
	// Rule: the scaler may grow TableUpdate and Answer (protobuf's forward
	// compatibility); fields the front does not know, or known numbers
	// with another wire type, are skipped, not fatal.
	tb := newTable()
	update := cat(varintField(15, 1), bytesField(16, []byte("future")),
		bytesField(1, []byte("reset as bytes")),
		bytesField(3, cat(varintField(1, 5), varintField(2, 1), bytesField(9, []byte("x")),
			bytesField(3, []byte("GM5")), tag(10, 5), []byte{0, 0, 0, 0})))
	if err := tb.apply(update); err != nil {
		t.Fatalf("unknown fields are fatal: %v", err)
	}
	_, answers, _ := snapshot(tb)
	if want := (answer{ready: true, getMetrics: []byte("GM5")}); !reflect.DeepEqual(answers[5], want) {
		t.Fatalf("got %+v", answers[5])
	}
}

func TestTableApplyRemovesPackedAndUnpackedIds(t *testing.T) {
	// Rule: a repeated uint64 arrives packed (proto3's default) or one
	// varint per element, and a parser must accept both (protobuf.dev
	// encoding spec, "packed repeated fields"); removing an id also forgets
	// the request keys learned for it.
	tb := newTable()
	if err := tb.apply(cat(answerMsg(1, true, "a", "a"), answerMsg(2, true, "b", "b"),
		answerMsg(3, true, "c", "c"))); err != nil {
		t.Fatal(err)
	}
	tb.learn([]byte("k1"), 1)
	tb.learn([]byte("k3"), 3)
	if err := tb.apply(cat(varintField(4, 1), bytesField(4, []byte{2, 3}))); err != nil {
		t.Fatal(err)
	}
	_, answers, keys := snapshot(tb)
	if len(answers) != 0 || len(keys) != 0 {
		t.Fatalf("left %v %v", answers, keys)
	}
}

func TestTableApplyIsAllOrNothing(t *testing.T) {
	// Rule: a malformed update (truncated, bad nested Answer, bad packed
	// list) is refused whole: the table keeps serving what it had.
	good := cat(bytesField(2, []byte("SPEC")), answerMsg(1, true, "a", "b"))
	for name, bad := range map[string][]byte{
		"truncated":     cat(answerMsg(2, true, "x", "y"), []byte{0x1a, 0x09, 0x08}),
		"nested answer": cat(answerMsg(2, true, "x", "y"), bytesField(3, []byte{0x08, 0x80})),
		"packed ids":    cat(varintField(1, 1), bytesField(4, []byte{0x80})),
	} {
		tb := newTable()
		if err := tb.apply(good); err != nil {
			t.Fatal(err)
		}
		s1, a1, k1 := snapshot(tb)
		if err := tb.apply(bad); err == nil {
			t.Fatalf("%s: malformed update accepted", name)
		}
		if s2, a2, k2 := snapshot(tb); !bytes.Equal(s1, s2) || !reflect.DeepEqual(a1, a2) || !reflect.DeepEqual(k1, k2) {
			t.Fatalf("%s: a refused update changed the table", name)
		}
	}
}

func FuzzTableApply(f *testing.F) {
	// Rule: no update, however malformed, panics the front; a refused one
	// leaves the table exactly as it was.
	f.Add(cat(varintField(1, 1), bytesField(2, []byte("SPEC")), answerMsg(1, true, "a", "b")))
	f.Add(cat(varintField(4, 1), bytesField(4, []byte{2, 3})))
	f.Add([]byte{0x1a, 0x09, 0x08})
	f.Add(bytesField(4, []byte{0x80}))
	f.Fuzz(func(t *testing.T, b []byte) {
		tb := newTable()
		if err := tb.apply(cat(bytesField(2, []byte("SPEC")), answerMsg(1, true, "a", "b"))); err != nil {
			t.Fatal(err)
		}
		tb.learn([]byte("k"), 1)
		s1, a1, k1 := snapshot(tb)
		if err := tb.apply(b); err != nil {
			if s2, a2, k2 := snapshot(tb); !bytes.Equal(s1, s2) || !reflect.DeepEqual(a1, a2) || !reflect.DeepEqual(k1, k2) {
				t.Fatalf("refused update %x changed the table", b)
			}
		}
	})
}
