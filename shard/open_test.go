package shard

import (
	"encoding/json"
	"strings"
	"testing"
)

// An open shard is stolen from only once its first page has put its
// cursor on a real second, and it survives a JSON round trip (the crawl
// persists it as is).
func TestOpenShard(t *testing.T) {
	open := Shard{ID: "1", Since: 1000, Until: OpenTop, Cursor: OpenTop}
	b, err := json.Marshal(open)
	if err != nil {
		t.Fatal(err)
	}
	var back Shard
	if err := json.Unmarshal(b, &back); err != nil || back != open || !back.Open() {
		t.Fatalf("round trip %s: %+v, %v", b, back, err)
	}
	q, err := NewQueue([]Shard{{ID: "0", Since: 0, Until: 999, Cursor: 999}, open}, Uniform{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, ok := q.Next(); !ok {
			t.Fatal("a pending shard was not handed out")
		}
	}
	give, ok := q.Next()
	if !ok || !strings.HasPrefix(give.ID, "0.") {
		t.Fatalf("steal %+v (%v): want a part of shard 0, not of the open shard at its top", give, ok)
	}
	if _, err := q.Advance("1", 5000); err != nil {
		t.Fatal(err)
	}
	give, ok = q.Next()
	if !ok || !strings.HasPrefix(give.ID, "1.") || give.Until >= 5000 {
		t.Fatalf("steal %+v (%v): want a part of the open shard below its cursor", give, ok)
	}
}
