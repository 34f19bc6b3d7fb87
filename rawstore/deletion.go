package rawstore

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nostr-archiver/archiver/event"
)

// Deletion requests (NIP-09, kind 5) are recorded and reported, never
// applied: the archive keeps what it was served. A valid kind-5 event
// adds, with its other index entries, one entry per event it names:
//
//	I|x|e|0xff|id(32)|^created_at|request id           (an e tag)
//	I|x|a|len|<kind>:<pubkey>:<d>|^created_at|request id (an a tag)
//
// so that "which requests name this event" is one short range read.
const idxDeletion = 'x'

// deletionMarkKey, when present, says the deletion index covers every
// valid kind-5 event (it came after the other indexes: an archive indexed
// before it needs BuildIndexes once more).
var deletionMarkKey = []byte{prefixInternal, 'd', 'e', 'l', 'e', 't', 'i', 'o', 'n', 's'}

// ErrDeletionsNotIndexed is returned by the deletion reports on an
// archive whose deletion index was never built (see BuildIndexes).
var ErrDeletionsNotIndexed = errors.New("the archive's deletion requests are not indexed yet (archiver reprocess --index)")

const kindDeletion = 5

func deletionIndexPrefix(letter byte, value string) []byte {
	return valueIndexPrefix(idxDeletion, letter, value)
}

// deletionKeys appends the deletion index keys of e, a kind-5 event.
func deletionKeys(set func(p []byte), e *event.Event) {
	for _, t := range e.Tags {
		if len(t) >= 2 && (t[0] == "e" || t[0] == "a") {
			if p := deletionIndexPrefix(t[0][0], t[1]); p != nil {
				set(p)
			}
		}
	}
}

// DeletionsReady reports whether the deletion index covers every valid
// event.
func (s *Store) DeletionsReady() (bool, error) {
	if _, closer, err := s.r.Get(deletionMarkKey); err == nil {
		closer.Close()
		return true, nil
	} else if !errors.Is(err, pebble.ErrNotFound) {
		return false, fmt.Errorf("rawstore: read deletion index mark: %w", err)
	}
	last, err := s.lastKey([]byte{prefixVerdict})
	return last == nil && err == nil, err
}

// buildDeletionIndex indexes the valid kind-5 events of an archive whose
// other indexes were built before the deletion index: they are listed by
// the kind index.
func (s *Store) buildDeletionIndex(ctx context.Context) error {
	if ready, err := s.DeletionsReady(); err != nil || ready {
		return err
	}
	p := kindIndexPrefix(kindDeletion)
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return fmt.Errorf("rawstore: build deletion index: %w", err)
	}
	defer it.Close()
	b := s.db.NewBatch()
	defer b.Close()
	for it.First(); it.Valid(); it.Next() {
		if k := it.Key(); len(k) == len(p)+indexSuffixLen {
			id := [32]byte(k[len(p)+8:])
			if err := s.indexStored(b, &id); err != nil && !s.noteDamage(err) {
				return fmt.Errorf("rawstore: build deletion index: %w", err)
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("rawstore: build deletion index: %w", err)
	}
	_ = b.Set(deletionMarkKey, nil, nil)
	return s.gate("build deletion index", b.Len(), func() error { return b.Commit(pebble.Sync) })
}

// DeletionRequest is a valid kind-5 event that names an event.
type DeletionRequest struct {
	ID        [32]byte
	PubKey    [32]byte
	CreatedAt int64
	Tag       string // how it names the event: "e" (its id) or "a" (its address)
	// Honoured says NIP-09 asks relays to honour it for this event; Why
	// says why not otherwise.
	Honoured bool
	Why      string
}

// DeletionRequests returns the valid deletion requests that name e, by
// id or (a replaceable or addressable event) by address, newest first.
func (s *Store) DeletionRequests(e *event.Event) ([]DeletionRequest, error) {
	if ready, err := s.DeletionsReady(); err != nil || !ready {
		if err == nil {
			err = ErrDeletionsNotIndexed
		}
		return nil, err
	}
	q := &query{s: s}
	var out []DeletionRequest
	for _, by := range []struct{ tag, value string }{{"e", hex.EncodeToString(e.ID[:])}, {"a", address(e)}} {
		if by.value == "" {
			continue
		}
		p := deletionIndexPrefix(by.tag[0], by.value)
		if p == nil {
			continue
		}
		err := s.forEachIndexed(p, p, func(reqID []byte) error {
			r, _, err := q.load(reqID)
			if err != nil || r == nil || r.Kind != kindDeletion {
				return err
			}
			d := DeletionRequest{ID: r.ID, PubKey: r.PubKey, CreatedAt: r.CreatedAt, Tag: by.tag}
			d.Why = honours(r, e, by.tag)
			d.Honoured = d.Why == ""
			out = append(out, d)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, q.damage.err()
}

// honours says why NIP-09 does not ask relays to honour deletion request
// r, naming e by tag, for e ("" if it does).
func honours(r, e *event.Event, tag string) string {
	switch {
	case r.PubKey != e.PubKey:
		return "requested by another key, not honoured by relays"
	case e.Kind == kindDeletion:
		return "a deletion request cannot itself be deleted (NIP-09)"
	case tag == "a" && r.CreatedAt < e.CreatedAt:
		return "made before this version: an address deletes the versions up to its created_at"
	}
	return ""
}

// address is e's NIP-01 address, "" if it has none: <kind>:<pubkey>:<d>
// for an addressable event, <kind>:<pubkey>: for a replaceable one.
func address(e *event.Event) string {
	d := ""
	switch {
	case 30000 <= e.Kind && e.Kind < 40000:
		d = dTag(e.Tags)
	case e.Kind == 0 || e.Kind == 3 || 10000 <= e.Kind && e.Kind < 20000:
	default:
		return ""
	}
	return strconv.Itoa(e.Kind) + ":" + hex.EncodeToString(e.PubKey[:]) + ":" + d
}

// forEachIndexed calls fn with the id of every entry of index range p
// from key lo on (newest first).
func (s *Store) forEachIndexed(p, lo []byte, fn func(id []byte) error) error {
	return s.forEachKey(p, lo, func(k []byte) error {
		if len(k) != len(p)+indexSuffixLen {
			return nil
		}
		return fn(k[len(p)+8:])
	})
}

// DeletionCounts is what `archiver stats` says of deletion requests.
type DeletionCounts struct {
	Requests int64 `json:"deletion_requests"` // valid kind-5 events
	// Deleted counts the valid events that a valid deletion request of
	// their own author names (NIP-09's: the ones relays would drop).
	Deleted int64 `json:"deletion_requested"`
}

// Deletions counts deletion requests and the events they cover.
func (s *Store) Deletions() (DeletionCounts, error) {
	var c DeletionCounts
	ids, err := s.DeletedIDs()
	c.Deleted = int64(len(ids))
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return c, err
	}
	p := kindIndexPrefix(kindDeletion)
	if err := s.forEachIndexed(p, p, func([]byte) error { c.Requests++; return nil }); err != nil {
		return c, err
	}
	return c, err
}

// DeletedIDs returns the valid events that a valid deletion request of
// their own author names, by id, or by address for the versions up to
// its created_at (export --honor-deletions leaves them out). It holds
// them all in memory: an id and a map entry each.
func (s *Store) DeletedIDs() (map[[32]byte]struct{}, error) {
	if ready, err := s.DeletionsReady(); err != nil || !ready {
		if err == nil {
			err = ErrDeletionsNotIndexed
		}
		return nil, err
	}
	q := &query{s: s}
	out := map[[32]byte]struct{}{}
	requests := map[[32]byte]*event.Event{}
	request := func(id []byte) (*event.Event, error) {
		if r, ok := requests[[32]byte(id)]; ok {
			return r, nil
		}
		r, _, err := q.load(id)
		if r != nil && r.Kind != kindDeletion {
			r = nil
		}
		requests[[32]byte(id)] = r
		return r, err
	}
	add := func(r, e *event.Event, tag string) {
		if r != nil && e != nil && honours(r, e, tag) == "" {
			out[e.ID] = struct{}{}
		}
	}
	// By id: I|x|e|0xff|target|suffix.
	ep := []byte{prefixIndex, idxDeletion, 'e', hexTagLen}
	err := s.forEachKey(ep, ep, func(k []byte) error {
		if len(k) != len(ep)+idLen+indexSuffixLen {
			return nil
		}
		r, err := request(k[len(ep)+idLen+8:])
		if err != nil || r == nil {
			return err
		}
		e, _, err := q.load(k[len(ep) : len(ep)+idLen])
		add(r, e, "e")
		return err
	})
	if err != nil {
		return out, err
	}
	// By address: every version of it up to the request's created_at.
	ap := []byte{prefixIndex, idxDeletion, 'a'}
	err = s.forEachKey(ap, ap, func(k []byte) error {
		if len(k) < len(ap)+1+indexSuffixLen || int(k[len(ap)]) != len(k)-len(ap)-1-indexSuffixLen {
			return nil
		}
		addr := string(k[len(ap)+1 : len(k)-indexSuffixLen])
		kind, pk, ok := parseAddress(addr)
		if !ok {
			return nil
		}
		r, err := request(k[len(k)-idLen:])
		if err != nil || r == nil || r.PubKey != pk {
			return err
		}
		p := authorKindIndexPrefix(&pk, kind)
		from := appendIndexSuffix(bytes.Clone(p), r.CreatedAt, &[32]byte{})
		return s.forEachIndexed(p, from, func(id []byte) error {
			e, _, err := q.load(id)
			if e != nil && address(e) == addr {
				add(r, e, "a")
			}
			return err
		})
	})
	if err != nil {
		return out, err
	}
	return out, q.damage.err()
}

// parseAddress reads the kind and author of <kind>:<pubkey hex>:<d>.
func parseAddress(a string) (kind int, pk [32]byte, ok bool) {
	ks, rest, ok1 := strings.Cut(a, ":")
	ph, _, ok2 := strings.Cut(rest, ":")
	kind, err := strconv.Atoi(ks)
	if !ok1 || !ok2 || err != nil || kind < 0 || kind > 65535 || event.DecodeHex32(&pk, []byte(ph)) != nil {
		return 0, pk, false
	}
	return kind, pk, true
}

// forEachKey calls fn with every key with prefix p from lo on.
func (s *Store) forEachKey(p, lo []byte, fn func(k []byte) error) error {
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(p)})
	if err != nil {
		return fmt.Errorf("rawstore: read index: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		if err := fn(it.Key()); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("rawstore: read index: %w", err)
	}
	return nil
}
