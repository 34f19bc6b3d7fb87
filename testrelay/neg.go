package testrelay

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nostr-archiver/archiver/negentropy"
)

// NegResponder is the relay side of one NIP-77 reconciliation.
type NegResponder interface {
	Respond(msg []byte) ([]byte, error)
}

// negState is one open reconciliation; owned by the connection's reader.
type negState struct {
	resp NegResponder
	last time.Time
}

// onNeg handles NEG-OPEN, NEG-MSG and NEG-CLOSE (NIP-77). It runs on the
// reader goroutine, which owns c.negs.
func (c *conn) onNeg(label string, args []json.RawMessage, o *Options) {
	if o.NegNoticeOnly {
		c.refuse("NOTICE", "ERROR: bad msg: negentropy disabled")
		return
	}
	if !o.NIP77 {
		c.refuse("NOTICE", "ERROR: unknown cmd: "+label)
		return
	}
	var id string
	if len(args) == 0 || json.Unmarshal(args[0], &id) != nil || id == "" || len(id) > maxSubIDLen {
		c.refuse("NOTICE", "ERROR: bad msg: "+label+" needs a subscription id")
		return
	}
	if c.negs == nil {
		c.negs = map[string]*negState{}
	}
	switch label {
	case "NEG-CLOSE":
		delete(c.negs, id)
		return
	case "NEG-OPEN":
		delete(c.negs, id)
		if len(args) != 3 {
			c.refuse("NEG-ERR", id, "error: NEG-OPEN needs a filter and a message")
			return
		}
		if o.AuthRequired && !c.authed {
			c.refuse("NEG-ERR", id, reason(o, "auth-required", "this relay serves authenticated clients only"))
			return
		}
		f, err := parseFilter(args[1])
		if err != nil {
			c.refuse("NEG-ERR", id, "error: bad filter: "+err.Error())
			return
		}
		f.strictBounds(o.SinceExclusive, o.UntilExclusive)
		items := c.negItems(&f)
		if o.NegCut > 0 && len(items) > o.NegCut {
			items = items[len(items)-o.NegCut:] // the newest, in negentropy order
		}
		if o.NegMaxRecords > 0 && len(items) > o.NegMaxRecords {
			why := "blocked: too many records"
			if o.NegCapInReason {
				why = fmt.Sprintf("blocked: too many records, max %d", o.NegMaxRecords)
			}
			c.refuse("NEG-ERR", id, why)
			return
		}
		var resp NegResponder
		if o.NegResponder != nil {
			resp, err = o.NegResponder(items, o.NegFrameLimit)
		} else {
			resp, err = negentropy.New(items, o.NegFrameLimit)
		}
		if err != nil {
			c.refuse("NEG-ERR", id, "error: "+err.Error())
			return
		}
		st := &negState{resp: resp}
		c.negs[id] = st
		c.negAnswer(id, st, args[2])
	case "NEG-MSG":
		st := c.negs[id]
		if st == nil {
			c.refuse("NEG-ERR", id, "closed: unknown subscription")
			return
		}
		idle := o.NegIdleClose > 0 && time.Since(st.last) > o.NegIdleClose
		if n := c.r.negSeq.Add(1); idle || (o.NegCloseEvery > 0 && n%int64(o.NegCloseEvery) == 0) {
			delete(c.negs, id)
			c.refuse("NEG-ERR", id, "closed: idle timeout")
			return
		}
		if len(args) != 2 {
			delete(c.negs, id)
			c.refuse("NEG-ERR", id, "error: NEG-MSG needs a message")
			return
		}
		c.negAnswer(id, st, args[1])
	}
}

func (c *conn) negAnswer(id string, st *negState, hexArg json.RawMessage) {
	var h string
	msg, err := []byte(nil), json.Unmarshal(hexArg, &h)
	if err == nil {
		msg, err = hex.DecodeString(h)
	}
	var out []byte
	if err == nil {
		out, err = st.resp.Respond(msg)
	}
	if err != nil {
		delete(c.negs, id)
		c.refuse("NEG-ERR", id, "error: "+err.Error())
		return
	}
	st.last = time.Now()
	c.sendMsg("NEG-MSG", id, hex.EncodeToString(out))
}

// negItems lists the stored events f matches, in negentropy order.
func (c *conn) negItems(f *filter) []negentropy.Item {
	snap := c.r.store.snap.Load()
	lo, hi := snap.window(f, false)
	items := make([]negentropy.Item, 0, hi-lo)
	for i := lo; i < hi; i++ {
		it := &snap.items[i]
		var id [32]byte
		if it.Frame || it.CreatedAt < 0 || !f.matchesRest(it) || len(it.ID) != 64 {
			continue
		}
		if _, err := hex.Decode(id[:], []byte(it.ID)); err != nil {
			continue
		}
		items = append(items, negentropy.Item{Timestamp: uint64(it.CreatedAt), ID: id})
	}
	return negentropy.SortItems(items)
}
