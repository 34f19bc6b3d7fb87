package rawstore

import (
	"bytes"
	"sync"
)

// hotCopies keeps the bytes of recently ingested primary copies, by queue
// seq, so that the verify pool, which usually runs just behind the crawl,
// takes them from memory instead of reading them back from Pebble. It is
// bounded by bytes: past the budget the oldest are dropped and Load falls
// back to the store. Correctness never depends on it.
type hotCopies struct {
	mu     sync.Mutex
	budget int
	size   int
	byseq  map[uint64]hotCopy
	order  []uint64 // FIFO of seqs, for eviction
}

type hotCopy struct {
	relay uint32
	raw   []byte
}

func newHotCopies(budget int) *hotCopies {
	return &hotCopies{budget: budget, byseq: map[uint64]hotCopy{}}
}

func (h *hotCopies) add(seq uint64, relay uint32, raw []byte) {
	if h.budget <= 0 || len(raw) > h.budget {
		return
	}
	// A copy of its own: Ingest keeps nothing of its batch (the crawl
	// reuses a page's memory once it is stored). Its capacity, the size
	// class the allocator rounded it to, is what it costs.
	c := hotCopy{relay, bytes.Clone(raw)}
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.size+cap(c.raw) > h.budget && len(h.order) > 0 {
		old := h.order[0]
		h.order = h.order[1:]
		if o, ok := h.byseq[old]; ok {
			h.size -= cap(o.raw)
			delete(h.byseq, old)
		}
	}
	h.byseq[seq] = c
	h.order = append(h.order, seq)
	h.size += cap(c.raw)
}

// take returns and forgets the copy queued under seq.
func (h *hotCopies) take(seq uint64) (hotCopy, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.byseq[seq]
	if ok {
		delete(h.byseq, seq)
		h.size -= cap(c.raw)
	}
	// The FIFO keeps taken seqs until they reach its head; compact it when
	// it is mostly stale so it stays bounded too.
	if len(h.order) > 2*len(h.byseq)+1024 {
		live := h.order[:0]
		for _, s := range h.order {
			if _, ok := h.byseq[s]; ok {
				live = append(live, s)
			}
		}
		h.order = live
	}
	return c, ok
}
