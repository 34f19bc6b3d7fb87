package rawstore

import (
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// FuzzStoredBytes feeds arbitrary bytes, as a damaged or foreign archive
// may hold them, to every decoder of stored records: each must return a
// value or a CorruptError, never panic (export panicked on a short event
// record before).
func FuzzStoredBytes(f *testing.F) {
	id := [32]byte{7}
	f.Add(byte(prefixEvent), append([]byte{1, 0, 0, 0, 2}, `{"id":"x"}`...))
	f.Add(byte(prefixVerdict), []byte{statusValid, 0, 0, 0, 1})
	f.Add(byte(prefixVerdict), []byte{statusInvalid, 0, 0, 0, 1, 'b', 'a', 'd'})
	f.Add(byte(prefixQuarant), quarantineValue(3, "bad-sig", "line 7", &id, []byte("{}")))
	f.Add(byte(prefixAlternate), []byte{})
	f.Add(byte(prefixPending), id[:])
	f.Add(byte(prefixEvent), []byte{})
	f.Add(byte(prefixEvent), eventValue(2, 1_700_000_000, []byte(`{"id":"x"}`)))
	f.Add(byte(prefixProven), seenValue(1_700_000_000))
	f.Add(byte(prefixIndex), []byte("30023:"+strings.Repeat("ab", 32)+":d"))
	f.Add(byte(prefixEvent), segValue(2, 1_700_000_000, segLoc{segPos: segPos{seg: 1, off: 8}, n: 10}))
	// No segment exists: every version 3 value names a missing body.
	s := &Store{segs: &segments{fs: vfs.NewMem(), dir: segDirName, readOnly: true, open: map[uint32]*segFile{}}}
	f.Fuzz(func(t *testing.T, prefix byte, v []byte) {
		key := append([]byte{prefix}, id[:]...)
		if prefix == prefixPending || prefix == prefixQuarant {
			key = seqKey(prefix, 1)
		}
		var ce *CorruptError
		if _, raw, err := s.decodeEvent(key, v); err != nil && !errors.As(err, &ce) {
			t.Fatalf("decodeEvent: %v is not a CorruptError", err)
		} else if err == nil && (v[0] == eventV3 || len(raw) != len(v)-eventHeaderSize(v)) {
			t.Fatalf("decodeEvent: %d raw bytes of a %d-byte record", len(raw), len(v))
		}
		if _, _, _, err := decodeVerdict(key, v); err != nil && !errors.As(err, &ce) {
			t.Fatalf("decodeVerdict: %v is not a CorruptError", err)
		}
		if _, err := decodeQuarantined(key, v); err != nil && !errors.As(err, &ce) {
			t.Fatalf("decodeQuarantined: %v is not a CorruptError", err)
		}
		if seen := eventSeen(v); seen != 0 && ((v[0] != eventV2 || eventHeaderSize(v) != eventHeaderLenV2) && (v[0] != eventV3 || eventHeaderSize(v) != eventLenV3)) {
			t.Fatalf("eventSeen %d of a record of version %d", seen, v[0])
		}
		var m firstSeenMerger
		_ = m.MergeNewer(v)
		_ = m.MergeOlder(seenValue(5))
		if out, _, _ := m.Finish(true); provSeen(out) > 5 {
			t.Fatalf("first seen %d after a sighting at 5", provSeen(out))
		}
		if kind, _, ok := parseAddress(string(v)); ok && (kind < 0 || kind > 65535) {
			t.Fatalf("address %q: kind %d", v, kind)
		}
		_ = describeKey(key)
		_ = describeKey(v)
	})
}
