package rawstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// scanKey holds, while a key-order scan (ScanPending) is unfinished, the
// highest queue seq it may leave stale: the queue entries of copies the
// scan judged are only dropped when it completes, so until then a queued
// primary at or below it is checked for a verdict before it is judged.
var scanKey = []byte{prefixInternal, 's', 'c', 'a', 'n'}

// unqueuedKey, while present, says that pending copies are missing from
// the queue (ResetVerdicts queues nothing): only ScanPending finds them,
// and it removes the key when it completes.
var unqueuedKey = []byte{prefixInternal, 'u', 'n', 'q', 'u', 'e', 'u', 'e', 'd'}

// NeedsScan reports whether some pending copies can only be found by
// ScanPending (after ResetVerdicts or an ingest that LeaveUnqueued left
// out of the queue, until a scan completes).
func (s *Store) NeedsScan() bool { return s.unqueued.Load() }

// LeaveUnqueued makes Ingest leave the new primary copies it stores from
// now on out of the verify queue: the batch of the first one marks the
// archive as needing a key-order scan (NeedsScan), which ScanPending
// clears. It is for a store nobody verifies while it ingests and whose
// backlog a key-order scan will read anyway (`crawl --no-verify`): their
// queue entries, one of the four keys a new event costs, would be
// written, flushed and compacted, then dropped by that scan unread
// (~0.8 µs per event in a 1M crawl; docs/PERFORMANCE.md, session 27).
// Alternates are still queued.
func (s *Store) LeaveUnqueued() { s.noQueue.Store(true) }

// Judge decides a batch of pending copies: vs[i] judges items[i].
type Judge func(items []Pending, vs []Verdict) error

// ScanPending judges every pending copy in key order, primary copies
// first, then alternates, batch copies at a time, and returns how many it
// judged. It finds the copies no queue entry names (NeedsScan: after
// ResetVerdicts, `reprocess --all`, or a run that LeaveUnqueued), at the
// cost of reading their bodies at random, one read each: the queue
// (DrainQueue) reads them in the order they were stored, in runs.
//
// It excludes Ingest while it runs, so it is for an archive nobody is
// crawling into. Interrupted (ctx, error, crash), it leaves the archive
// consistent: what it judged keeps its verdict, the rest stays pending and
// queued, and the queue skips what the scan already judged.
func (s *Store) ScanPending(ctx context.Context, batch int, judge Judge) (int, error) {
	if batch < 1 {
		return 0, fmt.Errorf("rawstore: scan batch %d < 1", batch)
	}
	s.ingestMu.Lock()
	defer s.ingestMu.Unlock()
	upTo := s.pendingSeq.Load()
	if err := s.fold(); err != nil {
		return 0, err
	}
	if upTo > s.staleUpTo.Load() {
		if err := s.gate("begin verify scan", 0, func() error {
			return s.db.Set(scanKey, binary.BigEndian.AppendUint64(nil, upTo), pebble.Sync)
		}); err != nil {
			return 0, err
		}
		s.staleUpTo.Store(upTo)
	}
	n := 0
	for _, pass := range []struct {
		prefix  byte
		pending func(it, vit *pebble.Iterator, p *Pending) bool
	}{{prefixEvent, s.pendingPrimary}, {prefixAlternate, s.pendingAlternate}} {
		m, err := s.scanPass(ctx, batch, judge, pass.prefix, pass.pending)
		n += m
		if err != nil {
			return n, err
		}
	}
	// Everything queued up to upTo has been judged: drop those entries.
	// Entries the passes queued themselves (a promoted alternate's old
	// primary) are above upTo and stay.
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange(seqKey(prefixPending, 0), seqKey(prefixPending, upTo+1), nil)
	_ = b.Delete(scanKey, nil)
	_ = b.Delete(unqueuedKey, nil)
	if err := s.gate("end verify scan", b.Len(), func() error { return b.Commit(pebble.Sync) }); err != nil {
		return n, err
	}
	s.staleUpTo.Store(0)
	s.unqueued.Store(false)
	return n, nil
}

// scanPass walks the keys under prefix, pending() choosing what to judge.
// The iterators' snapshot is the pass's start: what Apply writes
// meanwhile is behind them.
func (s *Store) scanPass(ctx context.Context, batch int, judge Judge, prefix byte, pending func(it, vit *pebble.Iterator, p *Pending) bool) (int, error) {
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefix}, UpperBound: []byte{prefix + 1}})
	if err != nil {
		return 0, err
	}
	vit, err := s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixVerdict}, UpperBound: []byte{prefixVerdict + 1}})
	if err != nil {
		it.Close()
		return 0, err
	}
	return s.judgeBatches(ctx, judge, func(send func([]Pending) bool) error {
		it.First()
		vit.First()
		items := make([]Pending, 0, batch)
		for p := (Pending{}); pending(it, vit, &p); p = (Pending{}) {
			if items = append(items, p); len(items) == batch {
				if !send(items) {
					break
				}
				items = make([]Pending, 0, batch)
			}
		}
		if len(items) > 0 {
			send(items)
		}
		return errors.Join(it.Error(), vit.Error(), it.Close(), vit.Close())
	})
}

// DrainQueue judges the queued copies (NextPending) in queue order,
// batch copies at a time, until the queue is empty, and returns how many
// it judged. Queue order is the order the copies were stored in, which is
// the log's: each batch's bodies are read in a few runs (LoadAll), where
// key order (ScanPending) reads one body at a time at random. Unlike
// ScanPending it does not exclude Ingest; what is queued meanwhile is
// judged too.
func (s *Store) DrainQueue(ctx context.Context, batch int, judge Judge) (int, error) {
	if batch < 1 {
		return 0, fmt.Errorf("rawstore: drain batch %d < 1", batch)
	}
	var cursor uint64
	total := 0
	for {
		// A verdict may queue a copy behind the reader (a promoted
		// alternate's old primary): pass again until one finds nothing.
		n, err := s.judgeBatches(ctx, judge, func(send func([]Pending) bool) error {
			for {
				items, err := s.NextPending(cursor, batch)
				if err != nil || len(items) == 0 {
					return err
				}
				cursor = items[len(items)-1].Seq
				if err := s.LoadAll(items); err != nil {
					return err
				}
				if !send(items) {
					return nil
				}
			}
		})
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}

// judgeBatches judges the batches read() sends and applies their
// verdicts, in order. read runs on its own goroutine, a batch ahead, so
// reads overlap the verification, and a batch's verdicts are applied
// while the next batch is judged: the judge uses every core, the apply
// one, and in turn they left the other cores idle for a third of a scan.
// send reports false once the caller stops taking batches.
func (s *Store) judgeBatches(ctx context.Context, judge Judge, read func(send func([]Pending) bool) error) (int, error) {
	batches := make(chan []Pending, 1) // one batch read ahead
	stop := make(chan struct{})
	readErr := make(chan error, 1)
	go func() {
		defer close(batches)
		readErr <- read(func(items []Pending) bool {
			select {
			case batches <- items:
				return true
			case <-stop:
				return false
			}
		})
	}()

	n := 0
	err := func() (err error) {
		var applying chan error
		wait := func() error {
			if applying == nil {
				return nil
			}
			err := <-applying
			applying = nil
			return err
		}
		defer func() { err = errors.Join(err, wait()) }()
		for items := range batches {
			vs := make([]Verdict, len(items))
			if err := judge(items, vs); err != nil {
				return err
			}
			if err := wait(); err != nil {
				return err
			}
			done := make(chan error, 1)
			go func() { done <- s.Apply(items, vs) }()
			applying = done
			n += len(items)
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		return nil
	}()
	close(stop)
	for range batches { // let the reader see stop and finish
	}
	return n, errors.Join(err, <-readErr)
}

// pendingPrimary fills p with the primary copy without a verdict at or
// after it's position and steps it past; it reports false at the end.
// vit walks the verdicts alongside: both are in id order, so the join
// reads each key once and the bodies of judged copies not at all.
//
// A body that cannot be read is skipped (and recorded, see Damage): it
// stays pending, its old verdict kept if ResetVerdicts had one, for
// `archiver repair` to fetch again.
func (s *Store) pendingPrimary(it, vit *pebble.Iterator, p *Pending) bool {
	for ok := it.Valid(); ok; {
		k := it.Key()
		for vit.Valid() && bytes.Compare(vit.Key()[1:], k[1:]) < 0 {
			vit.Next()
		}
		if vit.Valid() && bytes.Equal(vit.Key()[1:], k[1:]) {
			ok = it.Next() // judged
			continue
		}
		if len(k) != 1+idLen {
			ok = it.Next() // not a primary record (never written so); left to check to show
			continue
		}
		relay, raw, err := s.readEvent(it)
		if err != nil {
			ok = skipPast(it, k)
			continue
		}
		copy(p.ID[:], k[1:])
		p.Relay, p.Raw = relay, append([]byte(nil), raw...)
		it.Next()
		return true
	}
	return false
}

// readEvent decodes the event record under it, noting it as damage if it
// cannot be read.
func (s *Store) readEvent(it *pebble.Iterator) (uint32, []byte, error) {
	v, err := value(it)
	if err != nil {
		s.noteDamage(err)
		return 0, nil, err
	}
	relay, raw, err := s.decodeEvent(it.Key(), v)
	if err != nil {
		s.noteDamage(err)
	}
	return relay, raw, err
}

// pendingAlternate is pendingPrimary for alternate copies: those still
// holding their bytes (a resolved one is emptied) are pending.
func (s *Store) pendingAlternate(it, _ *pebble.Iterator, p *Pending) bool {
	for ok := it.Valid(); ok; {
		k := it.Key()
		if len(k) != 1+idLen+hashLen {
			ok = it.Next()
			continue
		}
		v, err := value(it)
		if err == nil && len(v) == 0 {
			ok = it.Next() // resolved
			continue
		}
		var relay uint32
		var raw []byte
		if err == nil {
			relay, raw, err = s.decodeEvent(k, v)
		}
		if err != nil {
			s.noteDamage(err)
			ok = skipPast(it, k)
			continue
		}
		copy(p.ID[:], k[1:])
		p.Variant = append([]byte(nil), k[1+idLen:]...)
		p.Relay, p.Raw = relay, append([]byte(nil), raw...)
		it.Next()
		return true
	}
	return false
}
