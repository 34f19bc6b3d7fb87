package rawstore

import (
	"errors"
	"testing"
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
	f.Fuzz(func(t *testing.T, prefix byte, v []byte) {
		key := append([]byte{prefix}, id[:]...)
		if prefix == prefixPending || prefix == prefixQuarant {
			key = seqKey(prefix, 1)
		}
		var ce *CorruptError
		if _, raw, err := decodeEvent(key, v); err != nil && !errors.As(err, &ce) {
			t.Fatalf("decodeEvent: %v is not a CorruptError", err)
		} else if err == nil && len(raw) != len(v)-eventHeaderSize(v) {
			t.Fatalf("decodeEvent: %d raw bytes of a %d-byte record", len(raw), len(v))
		}
		if _, _, _, err := decodeVerdict(key, v); err != nil && !errors.As(err, &ce) {
			t.Fatalf("decodeVerdict: %v is not a CorruptError", err)
		}
		if _, err := decodeQuarantined(key, v); err != nil && !errors.As(err, &ce) {
			t.Fatalf("decodeQuarantined: %v is not a CorruptError", err)
		}
		_ = describeKey(key)
		_ = describeKey(v)
	})
}
