package rawstore

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Pending is one queued copy awaiting a verdict.
type Pending struct {
	Seq     uint64
	ID      [32]byte
	Variant []byte // the alternate's sha256; nil for the primary copy
	Relay   uint32
	Raw     []byte // nil when the copy is gone (already resolved)
	// Seen is when an alternate was first received (0: unknown; not
	// read for a primary copy, which Apply never rewrites).
	Seen int64
}

// Verdict is the lazy pool's judgement of one Pending copy.
type Verdict struct {
	Valid  bool
	Reason string // why it is invalid: "malformed", "id-mismatch", "bad-sig", ...
	// Index is a valid copy's index keys (IndexKeys of its parsed event)
	// when the verifier has them, so that Apply, which runs alone, does
	// not parse the copy a second time; nil: Apply parses it.
	Index [][]byte
}

const (
	statusValid   byte = 1
	statusInvalid byte = 2
)

// NextPending returns up to max queued copies with Seq > after, in queue
// order, without their bytes: Load fetches those, so that callers can
// spread the reads over their workers.
func (s *Store) NextPending(after uint64, max int) ([]Pending, error) {
	it, err := s.r.NewIter(&pebble.IterOptions{
		LowerBound: seqKey(prefixPending, after+1),
		UpperBound: []byte{prefixPending + 1},
	})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []Pending
	for it.First(); it.Valid() && len(out) < max; it.Next() {
		p := Pending{Seq: binary.BigEndian.Uint64(it.Key()[1:])}
		ref := it.Value()
		if len(ref) < idLen {
			return nil, fmt.Errorf("rawstore: corrupt queue entry %d", p.Seq)
		}
		copy(p.ID[:], ref)
		if len(ref) > idLen {
			p.Variant = append([]byte(nil), ref[idLen:]...)
		}
		out = append(out, p)
	}
	return out, it.Error()
}

// LoadHot is Load from memory only: it fills p from the copies just
// ingested (see Options.HotBytes) and reports false, leaving p alone, when
// p's bytes would have to be read from disk.
func (s *Store) LoadHot(p *Pending) bool {
	if p.Variant != nil {
		return false
	}
	c, ok := s.hot.take(p.Seq)
	if ok {
		p.Relay, p.Raw = c.relay, c.raw
	}
	return ok
}

// Load fetches p's bytes and relay; p.Raw stays nil when the copy is gone
// (already resolved). A copy that cannot be read back is a *CorruptError.
// Safe for concurrent use.
func (s *Store) Load(p *Pending) error {
	if s.LoadHot(p) {
		return nil
	}
	key := eventKey(&p.ID)
	if p.Variant != nil {
		key = altKey(&p.ID, p.Variant)
	}
	v, err := s.get(key)
	if err != nil || v == nil {
		return err
	}
	if p.Variant != nil && len(v) == 0 {
		return nil // a resolved alternate
	}
	p.Relay, p.Raw, err = s.decodeEvent(key, v)
	p.Seen = eventSeen(v)
	return err
}

// LoadAll is Load for a batch of queued copies: those in memory are
// taken from there, and the primary copies' bodies are read from the log
// in log order, a run of neighbours at a time. A queue holds copies in
// the order they were stored, so a batch costs a few reads where Load
// costs one per copy, each missing the page cache (the log is written
// around it). Alternates are loaded one by one.
//
// A copy that cannot be read back is skipped as ScanPending skips it:
// noted as damage (Damage), its Raw left nil, so that Apply drops its
// queue entry and it stays pending for `archiver repair` to fetch again.
// Only an error reading the store (not a damaged record) is returned.
func (s *Store) LoadAll(items []Pending) error {
	var keys [][]byte
	at := make(map[[32]byte]int, len(items))
	load := func(p *Pending) error {
		if err := s.Load(p); err != nil && !s.noteDamage(err) {
			return err
		}
		return nil
	}
	for i := range items {
		p := &items[i]
		if s.LoadHot(p) {
			continue
		}
		if _, twice := at[p.ID]; twice || p.Variant != nil {
			if err := load(p); err != nil {
				return err
			}
			continue
		}
		keys = append(keys, eventKey(&p.ID))
		at[p.ID] = i
	}
	var failed error
	err := s.readStored(keys, func(k, v, raw []byte, err error) {
		var ce *CorruptError
		switch {
		case errors.As(err, &ce):
			// readStored noted it.
		case err != nil:
			failed = cmp.Or(failed, err)
		default:
			p := &items[at[[32]byte(k[1:])]]
			p.Relay, p.Raw, p.Seen = binary.BigEndian.Uint32(v[1:5]), append([]byte(nil), raw...), eventSeen(v)
		}
	})
	return cmp.Or(err, failed)
}

// Apply records verdicts (vs[i] judges items[i]) in one atomic batch and
// removes the items from the queue (items with Seq 0, from ScanPending,
// were not taken from it). Items must be in queue order: a primary copy's
// verdict is applied before its alternates', and an alternate that
// verifies replaces a primary that did not.
func (s *Store) Apply(items []Pending, vs []Verdict) error {
	if len(items) != len(vs) {
		return fmt.Errorf("rawstore: %d verdicts for %d items", len(vs), len(items))
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	a := applier{s: s, b: s.db.NewBatch(), status: map[[32]byte][]byte{}, primary: map[[32]byte][]byte{}}
	defer a.b.Close()
	for i := range items {
		if err := a.apply(&items[i], vs[i]); err != nil {
			return err
		}
		if items[i].Seq != 0 {
			// A queue key is deleted once before its seq can be set again
			// (Open resumes after the last key left), so a single delete
			// does: when it meets its set in a flush both vanish, where a
			// delete's tombstone is carried down to the last level.
			_ = a.b.SingleDelete(seqKey(prefixPending, items[i].Seq), nil)
		}
	}
	if err := a.setIndexKeys(); err != nil {
		return err
	}
	for name, d := range a.counters {
		if d != 0 {
			_ = a.b.Merge(counterKey(name), delta(d), nil)
		}
	}
	return s.gate("record verdicts", a.b.Len(), func() error { return a.b.Commit(pebble.NoSync) })
}

type applier struct {
	s         *Store
	b         *pebble.Batch
	status    map[[32]byte][]byte // V values written in this batch
	primary   map[[32]byte][]byte // E values written in this batch
	counters  map[string]int64
	indexKeys [][]byte // index entries of the events judged valid (see setIndexKeys)
}

func (a *applier) count(name string, d int64) {
	if a.counters == nil {
		a.counters = map[string]int64{}
	}
	a.counters[name] += d
}

func (a *applier) verdict(id *[32]byte) ([]byte, error) {
	if v, ok := a.status[*id]; ok {
		return v, nil
	}
	return a.s.get(verdictKey(id))
}

func (a *applier) setVerdict(id *[32]byte, relay uint32, v Verdict) {
	val := []byte{statusValid}
	if !v.Valid {
		val[0] = statusInvalid
	}
	val = binary.BigEndian.AppendUint32(val, relay)
	val = append(val, v.Reason...)
	a.status[*id] = val
	_ = a.b.Set(verdictKey(id), val, nil)
}

func (a *applier) apply(p *Pending, v Verdict) error {
	if p.Raw == nil {
		return nil // resolved already (e.g. an alternate deleted by an earlier verdict)
	}
	if p.Variant == nil {
		// A primary copy is queued once, when its id is first stored, and
		// its queue entry goes in the batch that records its verdict (and
		// ResetVerdicts clears both): so it has no verdict yet, and no
		// lookup is spent on proving it.
		if _, ok := a.status[p.ID]; ok {
			return nil // judged earlier in this batch
		}
		if p.Seq != 0 && p.Seq <= a.s.staleUpTo.Load() {
			// Queued before an unfinished key-order scan, which may have
			// judged it.
			if v, err := a.s.get(verdictKey(&p.ID)); err != nil || v != nil {
				return err
			}
		}
		a.setVerdict(&p.ID, p.Relay, v)
		a.count(CounterPending, -1)
		if v.Valid {
			a.index(&p.ID, p.Raw, v.Index)
			a.count(CounterValid, 1)
		} else {
			a.count(CounterInvalid, 1)
			a.count(reasonPrefix+v.Reason, 1)
		}
		return nil
	}

	// An alternate copy of an id that already has a primary.
	cur, err := a.verdict(&p.ID)
	if err != nil {
		return err
	}
	_ = a.b.Set(altKey(&p.ID, p.Variant), nil, nil) // resolved: kept so a resend is a duplicate
	switch {
	case !v.Valid:
		a.quarantine(p.Relay, v.Reason, &p.ID, p.Raw)
		a.count(reasonPrefix+v.Reason, 1)
	case cur != nil && cur[0] == statusValid:
		// Another serialization of a valid event: nothing to keep.
	default:
		// The alternate is valid and the primary is not (or not yet):
		// promote it. The old primary is quarantined with its reason, or
		// re-queued as an alternate if it had no verdict yet.
		old, err := a.primaryValue(&p.ID)
		if err != nil {
			return err
		}
		// An E key written directly must not be in the journal: see
		// journal.go.
		if err := a.s.foldIfPending(&p.ID); err != nil {
			return err
		}
		nv := eventValue(p.Relay, uint32(p.Seen), p.Raw)
		a.primary[p.ID] = nv
		_ = a.b.Set(eventKey(&p.ID), nv, nil)
		a.setVerdict(&p.ID, p.Relay, v)
		a.index(&p.ID, p.Raw, v.Index)
		a.count(CounterValid, 1)
		if cur != nil { // invalid primary
			a.count(CounterInvalid, -1)
			if old != nil {
				relay, raw, err := a.s.decodeEvent(eventKey(&p.ID), old)
				if err != nil {
					return err
				}
				a.quarantine(relay, string(cur[5:]), &p.ID, raw)
				h := sha256.Sum256(raw)
				_ = a.b.Set(altKey(&p.ID, h[:]), nil, nil)
			}
		} else {
			a.count(CounterPending, -1)
			var raw []byte
			if old != nil {
				if _, raw, err = a.s.decodeEvent(eventKey(&p.ID), old); err != nil {
					return err
				}
			}
			if old != nil && !bytes.Equal(raw, p.Raw) {
				// old goes on as an alternate, a pointer into the
				// segment log if it was one.
				h := sha256.Sum256(raw)
				k := altKey(&p.ID, h[:])
				_ = a.b.Set(k, old, nil)
				_ = a.b.Set(seqKey(prefixPending, a.s.pendingSeq.Add(1)), k[1:], nil)
			}
		}
	}
	return nil
}

func (a *applier) primaryValue(id *[32]byte) ([]byte, error) {
	if v, ok := a.primary[*id]; ok {
		return v, nil
	}
	return a.s.get(eventKey(id))
}

func (a *applier) quarantine(relay uint32, reason string, id *[32]byte, raw []byte) {
	_ = a.b.Set(seqKey(prefixQuarant, a.s.quarSeq.Add(1)), quarantineValue(relay, reason, "", id, raw), nil)
}

// ResetVerdicts forgets every verdict (`archiver reprocess --all`, e.g.
// after a verifier change): every stored copy is pending again.
// Quarantined copies stay quarantined and keep their counts. It queues
// nothing, which would cost a write per copy: it marks the archive as
// needing a key-order scan (NeedsScan), which ScanPending, the only way
// through such a backlog, clears. It returns how many ids are pending.
func (s *Store) ResetVerdicts() (pending int64, err error) {
	// ingestMu before applyMu, as in ScanPending (which applies while
	// excluding ingest).
	s.ingestMu.Lock()
	defer s.ingestMu.Unlock()
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	st, err := s.Stats()
	if err != nil {
		return 0, err
	}
	kept, err := s.unrecomputable()
	if err != nil {
		return 0, err
	}
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange([]byte{prefixVerdict}, []byte{prefixVerdict + 1}, nil)
	_ = b.DeleteRange([]byte{prefixPending}, []byte{prefixPending + 1}, nil)
	_ = b.Set(unqueuedKey, nil, nil)
	// No verdict is left to index (but the kept ones below, whose bodies
	// cannot be read, so no query could return them): the emptied indexes
	// are complete, and the scan that follows re-fills them.
	_ = b.DeleteRange([]byte{prefixIndex}, []byte{prefixIndex + 1}, nil)
	_ = b.Delete(indexBuildKey, nil)
	if s.isort != nil {
		// Deferred: the marks come back when the sort's keys are in.
		if err := s.isort.reset(); err != nil {
			return 0, err
		}
	} else {
		_ = b.Set(indexMarkKey, nil, nil)
		_ = b.Set(deletionMarkKey, nil, nil)
	}
	quarantined, err := s.quarantineCounts()
	if err != nil {
		return 0, err
	}
	// A verdict whose body cannot be read could not be recomputed: it is
	// written back after the range delete (later in the batch, so it wins).
	var keptValid, keptInvalid int64
	for _, k := range kept {
		_ = b.Set(k.key, k.verdict, nil)
		if k.verdict[0] == statusValid {
			keptValid++
		} else {
			keptInvalid++
			quarantined[string(k.verdict[5:])]++
		}
	}
	_ = b.Merge(counterKey(CounterValid), delta(keptValid-st.Valid), nil)
	_ = b.Merge(counterKey(CounterInvalid), delta(keptInvalid-st.Invalid), nil)
	_ = b.Merge(counterKey(CounterPending), delta(st.Valid+st.Invalid-keptValid-keptInvalid), nil)
	for reason, n := range st.InvalidCopies {
		_ = b.Merge(counterKey(reasonPrefix+reason), delta(quarantined[reason]-n), nil)
	}
	for reason, n := range quarantined {
		if _, ok := st.InvalidCopies[reason]; !ok {
			_ = b.Merge(counterKey(reasonPrefix+reason), delta(n), nil)
		}
	}
	if err := s.gate("reset verdicts", b.Len(), func() error { return b.Commit(pebble.Sync) }); err != nil {
		return 0, err
	}
	s.unqueued.Store(true)
	return st.Events - int64(len(kept)), nil
}

type keptVerdict struct{ key, verdict []byte }

// unrecomputable returns the verdicts of primary copies whose bytes cannot
// be read back (noting each as damage): forgetting them would leave the
// ids pending for ever, with nothing to judge. It reads every body, as the
// scan that follows a reset does anyway.
func (s *Store) unrecomputable() ([]keptVerdict, error) {
	if err := s.fold(); err != nil {
		return nil, err
	}
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixEvent}, UpperBound: []byte{prefixEvent + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []keptVerdict
	for ok := it.First(); ok; {
		k := append([]byte(nil), it.Key()...)
		if _, _, err := s.readEvent(it); err == nil {
			ok = it.Next()
			continue
		}
		var id [32]byte
		copy(id[:], k[1:])
		v, err := s.get(verdictKey(&id))
		if err != nil && !s.noteDamage(err) {
			return nil, err
		}
		if len(v) >= 5 {
			out = append(out, keptVerdict{verdictKey(&id), v})
		}
		ok = skipPast(it, k)
	}
	return out, it.Error()
}

func (s *Store) quarantineCounts() (map[string]int64, error) {
	out := map[string]int64{}
	err := s.ForEachQuarantined(func(q Quarantined) error {
		out[q.Reason]++
		return nil
	})
	return out, err
}

// Quarantined is a copy that failed for good.
type Quarantined struct {
	Seq    uint64
	Relay  uint32
	Reason string
	ID     *[32]byte // nil for frames that had no usable id
	Where  string    // where it was found, if known (Malformed.Where)
	Raw    []byte    // valid only during the callback
}

// ForEachQuarantined calls fn for every quarantined copy in order.
func (s *Store) ForEachQuarantined(fn func(Quarantined) error) error {
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixQuarant}, UpperBound: []byte{prefixQuarant + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		v, err := value(it)
		var q Quarantined
		if err == nil {
			q, err = decodeQuarantined(it.Key(), v)
		}
		if err != nil {
			return err
		}
		if err := fn(q); err != nil {
			return err
		}
	}
	return it.Error()
}

// decodeQuarantined decodes a Q entry (see quarantineValue).
func decodeQuarantined(k, v []byte) (Quarantined, error) {
	bad := corrupt(k, fmt.Errorf("quarantine entry of %d bytes", len(v)))
	if len(k) != 9 || len(v) < 6 || len(v) < 6+int(v[4]) {
		return Quarantined{}, bad
	}
	q := Quarantined{Seq: binary.BigEndian.Uint64(k[1:]), Relay: binary.BigEndian.Uint32(v), Reason: string(v[5 : 5+v[4]])}
	flags, rest := v[5+v[4]], v[6+v[4]:]
	if flags&quarID != 0 {
		if len(rest) < idLen {
			return Quarantined{}, bad
		}
		var id [32]byte
		copy(id[:], rest)
		q.ID, rest = &id, rest[idLen:]
	}
	if flags&quarWhere != 0 {
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
			return Quarantined{}, bad
		}
		q.Where, rest = string(rest[1:1+rest[0]]), rest[1+rest[0]:]
	}
	q.Raw = rest
	return q, nil
}

// ForEachValid calls fn with every id whose stored copy verified, in id
// order. raw is valid only during the callback. Nothing pending or invalid
// is ever passed: this is what export reads. A damaged record (a verdict
// or body that cannot be read back) is skipped and the walk goes on; the
// error returned then is a *DamageError naming them (errors.Is ErrCorrupt).
func (s *Store) ForEachValid(fn func(id [32]byte, raw []byte) error) error {
	if err := s.fold(); err != nil {
		return err
	}
	vit, err := s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixVerdict}, UpperBound: []byte{prefixVerdict + 1}})
	if err != nil {
		return err
	}
	defer func() { vit.Close() }() // vit is replaced past damage
	eit, err := s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixEvent}, UpperBound: []byte{prefixEvent + 1}})
	if err != nil {
		return err
	}
	defer eit.Close()
	var damage damageLog
	bad := func(err error) {
		var ce *CorruptError
		if errors.As(err, &ce) {
			damage.add(ce)
			s.damage.add(ce)
		}
	}
	ek := make([]byte, 1+idLen)
	ek[0] = prefixEvent
	var lastV []byte
	var eSkipUntil []byte // event keys below it are in a damaged block
	for ok := vit.First(); ; {
		if !ok {
			err := vit.Error()
			if err == nil {
				break
			}
			if !pebble.IsCorruptionError(err) {
				return fmt.Errorf("rawstore: read verdicts: %w", err)
			}
			last := append([]byte{prefixVerdict}, lastV...)
			next := s.iterPastDamage(last, []byte{prefixVerdict + 1})
			upTo := "the end"
			if next != nil {
				upTo = describeKey(next.Key())
			}
			bad(corrupt(append(last, 0), fmt.Errorf("verdicts after this one unreadable, up to %s: %w", upTo, err)))
			if next == nil {
				break
			}
			vit.Close()
			vit, ok = next, true
			continue
		}
		lastV = append(lastV[:0], vit.Key()[1:]...)
		v, err := value(vit)
		if err != nil {
			bad(err)
			ok = skipPast(vit, vit.Key())
			continue
		}
		valid, _, _, err := decodeVerdict(vit.Key(), v)
		if err != nil {
			bad(err)
		}
		if !valid {
			ok = vit.Next()
			continue
		}
		copy(ek[1:], vit.Key()[1:])
		if bytes.Compare(ek, eSkipUntil) < 0 {
			// In the damaged key block met before: reading it again
			// would fail again, slowly.
			bad(corrupt(ek, fmt.Errorf("in a damaged block of event keys, up to %s", describeKey(eSkipUntil))))
			ok = vit.Next()
			continue
		}
		var ev []byte
		if eit.SeekGE(ek) && bytes.Equal(eit.Key(), ek) {
			if ev, err = value(eit); err != nil {
				unexhaust(eit, ek)
			}
		} else if err = eit.Error(); err == nil {
			// Stored after eit was made, its E key in the journal then
			// (journal.go), or missing: E keys are never deleted.
			if ev, err = s.get(ek); err == nil && ev == nil {
				err = corrupt(ek, errors.New("valid verdict without its event"))
			}
		} else {
			if !pebble.IsCorruptionError(err) {
				return fmt.Errorf("rawstore: read event %x: %w", ek[1:9], err)
			}
			bad(corrupt(ek, err))
			unexhaust(eit, ek)
			eSkipUntil = []byte{prefixEvent + 1}
			if next := s.iterPastDamage(ek, eSkipUntil); next != nil {
				eSkipUntil = append([]byte(nil), next.Key()...)
				_ = next.Close()
			}
			ok = vit.Next()
			continue
		}
		var raw []byte
		if err == nil {
			_, raw, err = s.decodeEvent(ek, ev)
		}
		if err != nil {
			bad(err)
			ok = vit.Next()
			continue
		}
		var id [32]byte
		copy(id[:], ek[1:])
		if err := fn(id, raw); err != nil {
			return err
		}
		ok = vit.Next()
	}
	return damage.err()
}
