package rawstore

import (
	"encoding/binary"
	"io"
	"strconv"

	"github.com/cockroachdb/pebble/v2"
)

// Counters are int64 values kept with Pebble merge operands: a batch adds
// a delta in the same atomic write as the change it counts, so counts and
// data never disagree after a crash, and no read-modify-write is needed.
var counterMerger = &pebble.Merger{
	Name: "archiver.counter.v1",
	Merge: func(key, value []byte) (pebble.ValueMerger, error) {
		if len(key) > 0 && key[0] == prefixProven {
			// Same merger name, so archives from before first-seen
			// times open unchanged.
			var m firstSeenMerger
			err := m.MergeNewer(value)
			return &m, err
		}
		var m sumMerger
		err := m.MergeNewer(value)
		return &m, err
	},
}

type sumMerger struct{ sum int64 }

func (m *sumMerger) MergeNewer(v []byte) error {
	if len(v) == 8 {
		m.sum += int64(binary.LittleEndian.Uint64(v))
	}
	return nil
}

func (m *sumMerger) MergeOlder(v []byte) error { return m.MergeNewer(v) }

func (m *sumMerger) Finish(bool) ([]byte, io.Closer, error) {
	return binary.LittleEndian.AppendUint64(nil, uint64(m.sum)), nil, nil
}

func delta(n int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(n)) }

// Counter names. Id-level counts partition the stored ids by the verdict
// on their primary copy; reasonPrefix counts invalid copies.
const (
	CounterEvents  = "events"  // unique ids stored
	CounterValid   = "valid"   // ids whose primary copy verified
	CounterInvalid = "invalid" // ids whose primary copy failed (a valid copy may still arrive)
	CounterPending = "pending" // ids not yet verified
	CounterDups    = "duplicates"
	reasonPrefix   = "bad:"
	relayPrefix    = "relay:"
)

// relayCounterKey names a per-relay counter: relay:<idx>:<name>.
func relayCounterKey(relay uint32, name string) []byte {
	return counterKey(relayPrefix + strconv.FormatUint(uint64(relay), 10) + ":" + name)
}

// RelayCounters returns the per-relay ingest counters of relay: new
// (ids it served first), duplicates, variants, copies, malformed.
func (s *Store) RelayCounters(relay uint32) (map[string]int64, error) {
	p := relayCounterKey(relay, "")
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	out := map[string]int64{}
	for it.First(); it.Valid(); it.Next() {
		if v := it.Value(); len(v) == 8 {
			out[string(it.Key()[len(p):])] = int64(binary.LittleEndian.Uint64(v))
		}
	}
	return out, it.Error()
}

// Stats is a snapshot of the counters.
type Stats struct {
	Events     int64 `json:"events"`
	Valid      int64 `json:"valid"`
	Invalid    int64 `json:"invalid"`
	Pending    int64 `json:"pending"`
	Duplicates int64 `json:"duplicates"`
	// InvalidCopies counts every copy that failed, by reason, including
	// copies of ids that have a valid copy and frames with no usable id.
	InvalidCopies map[string]int64 `json:"invalid_by_reason"`
}

// Stats reads the counters.
func (s *Store) Stats() (Stats, error) {
	st := Stats{InvalidCopies: map[string]int64{}}
	p := []byte{prefixCounter}
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return st, err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		name := string(it.Key()[1:])
		v := it.Value()
		if len(v) != 8 {
			continue
		}
		n := int64(binary.LittleEndian.Uint64(v))
		switch name {
		case CounterEvents:
			st.Events = n
		case CounterValid:
			st.Valid = n
		case CounterInvalid:
			st.Invalid = n
		case CounterPending:
			st.Pending = n
		case CounterDups:
			st.Duplicates = n
		default:
			if len(name) > len(reasonPrefix) && name[:len(reasonPrefix)] == reasonPrefix && n != 0 {
				st.InvalidCopies[name[len(reasonPrefix):]] = n
			}
		}
	}
	return st, it.Error()
}
