package rawstore

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// ErrCorrupt is matched (errors.Is) by every error about a record the
// store cannot read back: a block failing its checksum, a missing blob, a
// value too short for its kind.
var ErrCorrupt = errors.New("damaged record")

// CorruptError names one damaged record.
type CorruptError struct {
	Key []byte
	Err error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("damaged record %s: %s", describeKey(e.Key), oneLine(e.Err))
}

// oneLine is err's message for a line of its own. Pebble joins each
// corruption error with a carrier of its details, whose message is a
// line "<corruption detail carrier>": check printed it under every
// damaged record of a table.
func oneLine(err error) string {
	msg := err.Error()
	if pebble.ExtractDataCorruptionInfo(err) != nil {
		msg = strings.Replace(msg, "\n<corruption detail carrier>", "", 1)
	}
	return strings.ReplaceAll(msg, "\n", "; ")
}

func (e *CorruptError) Unwrap() error { return e.Err }

func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// ID returns the event id the damaged record belongs to, if it is keyed
// by one.
func (e *CorruptError) ID() ([32]byte, bool) {
	var id [32]byte
	// Only a key of its kind's exact length is the id's record: one a byte
	// longer stands for the unreadable keys after it (see checkPrefix),
	// and the id in it was read whole. A sighting (H key) is not listed:
	// fetching the event again does not rewrite it when the relay that
	// serves it is its first (see ingestLocked).
	n := map[byte]int{prefixEvent: 1 + idLen, prefixVerdict: 1 + idLen, prefixAlternate: 1 + idLen + hashLen, prefixProven: 1 + idLen + 4}
	if len(e.Key) > 0 && len(e.Key) == n[e.Key[0]] {
		copy(id[:], e.Key[1:])
		return id, true
	}
	return id, false
}

// describeKey says what a key is for a person: "event <id>", "verdict
// <id>", ...
func describeKey(k []byte) string {
	if len(k) == 0 {
		return "(no key)"
	}
	kind := map[byte]string{
		prefixEvent: "event", prefixAlternate: "alternate copy of event", prefixVerdict: "verdict of event",
		prefixProven: "provenance of event", prefixPending: "queue entry", prefixQuarant: "quarantined copy",
		prefixShard: "crawl cursor", prefixRelay: "relay record", prefixCounter: "counter",
		prefixMalformed: "malformed-frame mark", prefixInternal: "store mark",
		prefixNote: "relay note", prefixSighting: "sighting of event", prefixJournal: "event key journal entry",
	}[k[0]]
	switch {
	case kind == "":
		return fmt.Sprintf("key %x", k)
	case k[0] == prefixSighting && len(k) == sightingKeyLen:
		return fmt.Sprintf("%s %x by relay %d at %d", kind, k[1+4+8:], binary.BigEndian.Uint32(k[1:5]), binary.BigEndian.Uint64(k[5:13]))
	case len(k) >= 1+idLen && (k[0] == prefixEvent || k[0] == prefixAlternate || k[0] == prefixVerdict || k[0] == prefixProven):
		return kind + " " + hex.EncodeToString(k[1:1+idLen])
	case len(k) == 14 && k[0] == prefixJournal:
		return fmt.Sprintf("%s %d of relay %d", kind, binary.BigEndian.Uint64(k[1:9]), binary.BigEndian.Uint32(k[10:]))
	case len(k) == 9 && (k[0] == prefixPending || k[0] == prefixQuarant || k[0] == prefixJournal):
		return fmt.Sprintf("%s %d", kind, binary.BigEndian.Uint64(k[1:]))
	case k[0] == prefixCounter || k[0] == prefixInternal || k[0] == prefixNote:
		return fmt.Sprintf("%s %q", kind, k[1:])
	}
	return fmt.Sprintf("%s %x", kind, k[1:])
}

func corrupt(key []byte, err error) *CorruptError {
	return &CorruptError{Key: append([]byte(nil), key...), Err: err}
}

// decodeEvent splits an E or A value into its first relay and raw bytes,
// reading them from the segment log when v points there (version 3; raw
// is then the caller's own). Every reader of event bodies comes here: a
// body that cannot be read back is a *CorruptError of key, whichever
// kind of value held it.
func (s *Store) decodeEvent(key, v []byte) (relay uint32, raw []byte, err error) {
	n := eventHeaderSize(v)
	if n == 0 {
		return 0, nil, corrupt(key, fmt.Errorf("event record of %d bytes, version %v", len(v), v[:min(len(v), 1)]))
	}
	relay = binary.BigEndian.Uint32(v[1:5])
	if v[0] != eventV3 {
		return relay, v[n:], nil
	}
	raw, err = s.segs.read(key, segLocOf(v))
	return relay, raw, err
}

// decodeVerdict splits a V value.
func decodeVerdict(key, v []byte) (valid bool, relay uint32, reason string, err error) {
	if len(v) < 5 || (v[0] != statusValid && v[0] != statusInvalid) {
		return false, 0, "", corrupt(key, fmt.Errorf("verdict record of %d bytes", len(v)))
	}
	return v[0] == statusValid, binary.BigEndian.Uint32(v[1:5]), string(v[5:]), nil
}

// value reads the iterator's current value; an unreadable one comes back
// as a *CorruptError, and the caller must reposition the iterator (Pebble
// exhausts it) with skipPast.
func value(it *pebble.Iterator) ([]byte, error) {
	v, err := it.ValueAndErr()
	if err != nil {
		return nil, corrupt(it.Key(), err)
	}
	return v, nil
}

// skipPast repositions it just after key, clearing the error a failed
// value read left.
func skipPast(it *pebble.Iterator, key []byte) bool {
	k := append(append([]byte(nil), key...), 0)
	unexhaust(it, k)
	return it.SeekGE(k)
}

// unexhaust lets the next SeekGE at or after key move: a failed value read
// leaves the iterator exhausted, and Pebble answers a SeekGE to a later
// key after a SeekGE from that state without moving (a seek
// optimization). Any other positioning in between breaks the chain.
func unexhaust(it *pebble.Iterator, key []byte) {
	it.SeekLT(key)
}

// iterPastDamage returns an iterator over [k, upper), positioned on its
// first key, for the first k after last at which one can start: a key
// block that fails its checksum hides where the next block starts (that is
// in the damaged index), so it tries growing steps, reading the 8 key
// bytes after the prefix byte as a number (ids are uniformly spread). The
// first step is about one block's share of the ids, because every failed
// try costs: Pebble tests each bit of a block that fails its checksum for
// a single flipped one (0.4 s for a 16 KiB block). A fresh iterator per
// try carries no state from the failure. It returns nil at the end of the
// range; what it stepped over is lost to the walk, for the caller to
// report.
func (s *Store) iterPastDamage(last, upper []byte) *pebble.Iterator {
	var pos [8]byte
	copy(pos[:], last[1:])
	at := binary.BigEndian.Uint64(pos[:])
	step := uint64(1) << 52
	if st, err := s.Stats(); err == nil && st.Events > 0 {
		// A 16 KiB block holds about 300 keys (id, a blob handle or a
		// verdict, and Pebble's overhead).
		step = max(step, (^uint64(0))/uint64(st.Events)*300)
	}
	for ; step != 0; step <<= 1 {
		if at+step < at {
			return nil
		}
		k := binary.BigEndian.AppendUint64([]byte{last[0]}, at+step)
		if bytes.Compare(k, upper) >= 0 {
			return nil
		}
		it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: k, UpperBound: upper})
		if err != nil {
			return nil
		}
		if it.First() {
			return it
		}
		err = it.Error()
		_ = it.Close()
		if err == nil {
			return nil
		}
	}
	return nil
}

// damageLog keeps what the store found damaged since it was opened, so
// that a command can refuse to call its work complete over it, and what
// of it was repaired since: a copy fetched again that replaced an
// unreadable event (ingest) takes its record off the list.
type damageLog struct {
	mu       sync.Mutex
	open     map[string]*CorruptError // by record key, while not repaired
	lasting  int                      // past damageTracked: never taken off
	repaired int
}

// damageTracked bounds the damaged records kept by key. Beyond it damage
// is only counted, and a repair cannot take it off: the log says
// "damaged" until the next open (and `archiver check`) says otherwise.
const damageTracked = 1 << 16

const damageListed = 10 // examples given; the count goes on

func (d *damageLog) add(e *CorruptError) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.open[string(e.Key)]; ok {
		return
	}
	if len(d.open) >= damageTracked {
		d.lasting++
		return
	}
	if d.open == nil {
		d.open = map[string]*CorruptError{}
	}
	d.open[string(e.Key)] = e
}

// repair takes id's event record off the list, and its verdict's (ingest
// forgets the verdict of a replaced copy), once a fetched copy replaced it.
func (d *damageLog) repair(id *[32]byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range [][]byte{eventKey(id), verdictKey(id)} {
		if _, ok := d.open[string(k)]; ok {
			delete(d.open, string(k))
			d.repaired++
		}
	}
}

// DamageError sums up damaged records: how many, and the first few.
type DamageError struct {
	N     int
	First []*CorruptError
}

func (e *DamageError) Error() string {
	parts := make([]string, len(e.First))
	for i, c := range e.First {
		parts[i] = c.Error()
	}
	more := ""
	if e.N > len(e.First) {
		more = fmt.Sprintf("; and %d more", e.N-len(e.First))
	}
	return fmt.Sprintf("%d damaged records (run `archiver check`, then `archiver repair`): %s%s", e.N, strings.Join(parts, "; "), more)
}

func (e *DamageError) Is(target error) bool { return target == ErrCorrupt }

func (d *damageLog) err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.open)+d.lasting == 0 {
		return nil
	}
	first := make([]*CorruptError, 0, len(d.open))
	for _, e := range d.open {
		first = append(first, e)
	}
	slices.SortFunc(first, func(a, b *CorruptError) int { return bytes.Compare(a.Key, b.Key) })
	return &DamageError{N: len(d.open) + d.lasting, First: first[:min(len(first), damageListed)]}
}

// Damage returns a *DamageError for the damaged records this store met
// since it was opened (each skipped where it was met) and that no copy
// fetched since has replaced, or nil.
func (s *Store) Damage() error { return s.damage.err() }

// Repaired is how many damaged records met since the store was opened a
// fetched copy has replaced.
func (s *Store) Repaired() int {
	s.damage.mu.Lock()
	defer s.damage.mu.Unlock()
	return s.damage.repaired
}

// noteDamage records err if it is a *CorruptError and reports whether it
// was one (so the caller skips the record rather than failing).
func (s *Store) noteDamage(err error) bool {
	var ce *CorruptError
	if !errors.As(err, &ce) {
		return false
	}
	s.damage.add(ce)
	s.opts.Logger.Sugar().Warnf("rawstore: %v (skipped)", ce)
	return true
}
