package rawstore

import "encoding/binary"

// Key prefixes. Integers are big-endian so byte order is numeric order.
const (
	prefixEvent     = 'E' // E|id -> header|raw: the primary copy of an id (header: 1|relay, or 2|relay|first seen; see seen.go), or 3|relay|first seen|segment|offset|length: its bytes in the segment log (segment.go)
	prefixAlternate = 'A' // A|id|sha256(raw) -> header|raw, or empty once resolved: copies whose bytes differ from the primary
	prefixPending   = 'P' // P|seq -> id[|h8]: the verify queue
	prefixVerdict   = 'V' // V|id -> status|relay|reason: verdict on the primary copy
	prefixQuarant   = 'Q' // Q|seq -> relay|reason|id|raw: copies that failed for good
	prefixProven    = 'R' // R|id|relay -> first seen (uint32 merge operands, earliest wins; empty: unknown): later relays that served the id
	// H|relay|created_at|id -> (empty): every sighting, first or later, by relay (prefixSighting, sightings.go)
	// T|created_at|id -> first relay: every stored id by time (prefixIDs, ids.go)
	prefixShard     = 'S' // S|relay|job -> crawl-owned cursor state
	prefixRelay     = 'N' // N|relay -> crawl-owned relay record (url first)
	prefixCounter   = 'C' // C|name -> int64 (merge operands are deltas)
	prefixMalformed = 'M' // M|sha256(raw) -> (empty): malformed frames already quarantined
	prefixInternal  = 'X' // X|name -> the store's own bookkeeping (see scanKey, segTailKey)
	prefixNote      = 'D' // D|kind|url -> daemon-owned note on a relay URL (see PutNotes)
	prefixJournal   = 'J' // J|seq -> (id|E value)...: E keys committed but not yet folded into a table (journal.go)
)

const (
	idLen   = 32
	hashLen = 32 // sha256 of an alternate copy's bytes
)

func eventKey(id *[32]byte) []byte { return append([]byte{prefixEvent}, id[:]...) }

func verdictKey(id *[32]byte) []byte { return append([]byte{prefixVerdict}, id[:]...) }

func altKey(id *[32]byte, h []byte) []byte {
	k := make([]byte, 0, 1+idLen+hashLen)
	k = append(k, prefixAlternate)
	k = append(k, id[:]...)
	return append(k, h...)
}

func seqKey(prefix byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefix}, seq)
}

func provKey(id *[32]byte, relay uint32) []byte {
	k := make([]byte, 0, 1+idLen+4)
	k = append(k, prefixProven)
	k = append(k, id[:]...)
	return binary.BigEndian.AppendUint32(k, relay)
}

func relayKey(relay uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{prefixRelay}, relay)
}

func shardKey(relay uint32, job string) []byte {
	k := binary.BigEndian.AppendUint32([]byte{prefixShard}, relay)
	return append(k, job...)
}

func counterKey(name string) []byte { return append([]byte{prefixCounter}, name...) }

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}
