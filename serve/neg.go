package serve

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/nostr-archiver/archiver/filter"
	"github.com/nostr-archiver/archiver/negentropy"
)

// NIP-77 (negentropy), the relay side: NEG-OPEN names a filter and carries
// the client's first message; the server reads the (created_at, id) of the
// verified events matching it from the indexes (QueryIDs: no event is
// read), answers NEG-MSG for NEG-MSG until the client is done, and forgets
// the set on NEG-CLOSE, on an error, or with the connection.

// negFrameLimit bounds every NEG-MSG the server sends: hex doubles it,
// and 120 KB stays under strfry's (and most clients') 128 KiB frame cap.
const negFrameLimit = 60_000

var errTooMany = errors.New("too many records")

// negSession is one reconciliation. The reader opens, finds and closes
// it; only the writer touches n, in the order the messages came.
type negSession struct {
	cancelled atomic.Bool
	n         *negentropy.Neg // nil until the writer opened it
}

// negJob is a NEG-OPEN (filters set) or a NEG-MSG for the writer.
type negJob struct {
	s       *negSession
	filters []filter.Filter
	msg     []byte
}

// handleNeg parses NEG-OPEN, NEG-MSG and NEG-CLOSE on the reader.
func (c *conn) handleNeg(typ string, msg []json.RawMessage) {
	var id string
	if len(msg) < 2 || json.Unmarshal(msg[1], &id) != nil || id == "" || len(id) > maxSubIDLen {
		c.send("NOTICE", fmt.Sprintf("invalid: %s takes a subscription id of 1 to %d characters", typ, maxSubIDLen))
		return
	}
	if typ == "NEG-CLOSE" {
		c.subsMu.Lock()
		if s := c.negs[id]; s != nil {
			s.cancelled.Store(true)
			delete(c.negs, id)
		}
		c.subsMu.Unlock()
		return
	}
	var f filter.Filter
	var payload string
	switch {
	case typ == "NEG-OPEN" && len(msg) != 4, typ == "NEG-MSG" && len(msg) != 3:
		c.send("NEG-ERR", id, fmt.Sprintf("invalid: %s has %d elements", typ, len(msg)))
		return
	case json.Unmarshal(msg[len(msg)-1], &payload) != nil:
		c.send("NEG-ERR", id, "invalid: the negentropy message is not a string")
		return
	}
	raw, err := hex.DecodeString(payload)
	if err != nil {
		c.send("NEG-ERR", id, "invalid: the negentropy message is not hex")
		return
	}
	if typ == "NEG-OPEN" {
		if f, err = filter.ParseOne(msg[2]); err != nil {
			c.send("NEG-ERR", id, "invalid: "+err.Error())
			return
		}
	}
	c.subsMu.Lock()
	s := c.negs[id]
	switch {
	case typ == "NEG-MSG" && s == nil:
		c.subsMu.Unlock()
		c.send("NEG-ERR", id, "closed: no open reconciliation with this id")
		return
	case typ == "NEG-MSG":
		c.subsMu.Unlock()
		c.enqueue(job{id: id, neg: &negJob{s: s, msg: raw}})
		return
	case s != nil:
		s.cancelled.Store(true) // a NEG-OPEN reusing an id replaces it
	case len(c.negs) >= c.s.o.MaxSyncSessions:
		c.subsMu.Unlock()
		c.send("NEG-ERR", id, fmt.Sprintf("error: too many open reconciliations (%d)", c.s.o.MaxSyncSessions))
		return
	}
	s = &negSession{}
	c.negs[id] = s
	c.subsMu.Unlock()
	c.enqueue(job{id: id, neg: &negJob{s: s, filters: []filter.Filter{f}, msg: raw}})
}

// neg answers a NEG-OPEN or NEG-MSG on the writer.
func (c *conn) neg(id string, j *negJob) error {
	if j.s.cancelled.Load() {
		return nil
	}
	if j.filters != nil {
		n, reason, err := c.negOpen(j)
		switch {
		case errors.Is(err, errCancelled):
			return nil
		case errors.Is(err, errStopped):
			return err
		case err != nil:
			c.s.logErr(fmt.Errorf("serve: NEG-OPEN %q: %w", id, err))
			return c.negFail(id, j.s, reason+err.Error())
		}
		j.s.n = n
	}
	if j.s.n == nil {
		return nil // its NEG-OPEN failed and was answered
	}
	out, err := j.s.n.Respond(j.msg)
	if err != nil {
		return c.negFail(id, j.s, "invalid: "+err.Error())
	}
	b, _ := json.Marshal([]any{"NEG-MSG", id, hex.EncodeToString(out)})
	return c.write(b)
}

// negOpen reads the set the filter names, at most MaxSyncEvents items.
func (c *conn) negOpen(j *negJob) (*negentropy.Neg, string, error) {
	var items []negentropy.Item
	err := c.s.q.QueryIDs(j.filters, func(ts int64, id [32]byte) error {
		if j.s.cancelled.Load() {
			return errCancelled
		}
		if len(items)%4096 == 0 { // a large set takes a while: not past Close
			select {
			case <-c.stop:
				return errStopped
			default:
			}
		}
		if len(items) >= c.s.o.MaxSyncEvents {
			return errTooMany
		}
		items = append(items, negentropy.Item{Timestamp: uint64(ts), ID: id})
		return nil
	})
	switch {
	case errors.Is(err, errTooMany):
		// strfry's words, which clients (ours included) read as "ask
		// for a smaller range".
		return nil, "", fmt.Errorf("blocked: too many records (more than %d)", c.s.o.MaxSyncEvents)
	case err != nil:
		return nil, "error: ", err
	}
	// QueryIDs gives newest first; negentropy wants oldest first.
	n, err := negentropy.New(negentropy.SortItems(items), negFrameLimit)
	return n, "error: ", err
}

// negFail answers NEG-ERR and forgets the reconciliation.
func (c *conn) negFail(id string, s *negSession, reason string) error {
	c.subsMu.Lock()
	if c.negs[id] == s {
		delete(c.negs, id)
	}
	c.subsMu.Unlock()
	s.cancelled.Store(true)
	s.n = nil
	b, _ := json.Marshal([]any{"NEG-ERR", id, reason})
	return c.write(b)
}
