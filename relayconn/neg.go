package relayconn

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nostr-archiver/archiver/negentropy"
)

// NIP-77 (negentropy) over a Conn: NEG-OPEN, NEG-MSG and NEG-CLOSE out,
// NEG-MSG and NEG-ERR routed back by subscription id. The protocol is
// lock-step, one answer per message sent.

const subPrefixNeg = "n"

// negFrameLimit bounds our negentropy messages: hex doubles them, and
// strfry's default frame cap is 128 KiB.
const negFrameLimit = 50_000

// negReply is what came back for one NEG-OPEN or NEG-MSG.
type negReply struct {
	msg    string // NEG-MSG payload (hex)
	negErr string // NEG-ERR reason
	notice string // a NOTICE taken as the refusal of NIP-77
	lost   string // the connection went away
}

type negSub struct {
	id      string
	waiting bool          // a message is out with no answer yet (guarded by Conn.mu)
	replies chan negReply // one per message sent; a flood beyond is dropped
	bytes   int           // payload bytes received (guarded by Conn.mu)
}

// NegError is a relay's NEG-ERR.
type NegError struct{ Reason string }

func (e *NegError) Error() string { return "NEG-ERR " + e.Reason }

// Blocked reports a `blocked:` refusal (the query is too big for the
// relay) and the cap it named, 0 if none.
func (e *NegError) Blocked() (bool, int) {
	r := strings.TrimPrefix(e.Reason, "ERROR: ")
	if !strings.HasPrefix(r, "blocked:") {
		return false, 0
	}
	return true, firstNumber(r)
}

// Closed reports a `closed:` end (the relay dropped an idle reconciliation).
func (e *NegError) Closed() bool {
	return strings.HasPrefix(strings.TrimPrefix(e.Reason, "ERROR: "), "closed:")
}

func firstNumber(s string) int {
	start := strings.IndexAny(s, "0123456789")
	if start < 0 {
		return 0
	}
	end := start
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(s[start:end])
	return n
}

// ErrNegRefused: the relay does not do NIP-77 (a NOTICE refusal, a
// NEG-ERR other than blocked/closed, or no answer at all).
var ErrNegRefused = errors.New("NIP-77 refused")

func (c *Conn) negOpen(filter []byte, first []byte) (*negSub, error) {
	s := &negSub{replies: make(chan negReply, 2), waiting: true}
	c.mu.Lock()
	if c.closeErr != nil {
		c.mu.Unlock()
		return nil, c.closeErr
	}
	c.nextSub++
	s.id = subPrefixNeg + strconv.FormatUint(c.nextSub, 36)
	if c.negs == nil {
		c.negs = map[string]*negSub{}
	}
	c.negs[s.id] = s
	c.mu.Unlock()
	msg := make([]byte, 0, len(filter)+2*len(first)+32)
	msg = append(msg, `["NEG-OPEN","`+s.id+`",`...)
	msg = append(msg, filter...)
	msg = append(msg, `,"`...)
	msg = hex.AppendEncode(msg, first)
	msg = append(msg, `"]`...)
	if err := c.write(msg); err != nil {
		c.negForget(s)
		return nil, fmt.Errorf("NEG-OPEN to %s: %w", c.url, err)
	}
	return s, nil
}

func (c *Conn) negSend(s *negSub, m []byte) error {
	c.mu.Lock()
	s.waiting = true
	c.mu.Unlock()
	msg := make([]byte, 0, 2*len(m)+32)
	msg = append(msg, `["NEG-MSG","`+s.id+`","`...)
	msg = hex.AppendEncode(msg, m)
	msg = append(msg, `"]`...)
	if err := c.write(msg); err != nil {
		return fmt.Errorf("NEG-MSG to %s: %w", c.url, err)
	}
	return nil
}

// negClose ends s on both sides.
func (c *Conn) negClose(s *negSub) {
	c.negForget(s)
	_ = c.write([]byte(`["NEG-CLOSE","` + s.id + `"]`))
}

func (c *Conn) negForget(s *negSub) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.negs, s.id)
}

// negRecv waits for the answer to the last message sent on s, at most
// idle.
func (c *Conn) negRecv(ctx context.Context, s *negSub, idle time.Duration) (negReply, error) {
	t := time.NewTimer(idle)
	defer t.Stop()
	select {
	case r := <-s.replies:
		return r, nil
	case <-ctx.Done():
		return negReply{}, ctx.Err()
	case <-c.done:
		// The read loop may have delivered the answer just before exiting.
		select {
		case r := <-s.replies:
			return r, nil
		default:
		}
		return negReply{lost: "connection closed"}, nil
	case <-t.C:
		return negReply{}, fmt.Errorf("%w: no answer from %s within %v", ErrNegRefused, c.url, idle)
	}
}

// negDeliver hands r to the neg subscription id. Caller holds c.mu.
func (c *Conn) negDeliver(id string, r negReply) {
	s := c.negs[id]
	if s == nil {
		return // late answer of a closed reconciliation
	}
	s.waiting = false
	s.bytes += len(r.msg)
	select {
	case s.replies <- r:
	default:
	}
}

// negNotice takes a NOTICE as the refusal of every reconciliation waiting
// for an answer if it names negentropy (strfry: `ERROR: bad msg:
// negentropy disabled`) or no REQ is waiting that it could be meant for.
// Caller holds c.mu.
func (c *Conn) negNotice(text string) bool {
	lower := strings.ToLower(text)
	named := strings.Contains(lower, "negentropy") || strings.Contains(lower, "neg-")
	if !named {
		for _, o := range c.order {
			if o.frames == 0 {
				return false
			}
		}
	}
	took := false
	for id, s := range c.negs {
		if s.waiting {
			c.negDeliver(id, negReply{notice: text})
			took = true
		}
	}
	return took
}

// NegOutcome is one reconciliation's result.
type NegOutcome struct {
	Need   [][32]byte // ids the relay has and items lack
	Have   [][32]byte // ids items have and the relay lacks
	Rounds int
	Bytes  int // hex payload bytes received
}

// Reconcile reconciles items (the archive's ids, sorted) with the
// relay's events matching filter over c, waiting at most idle for each
// answer.
func Reconcile(ctx context.Context, c *Conn, filter []byte, items []negentropy.Item, idle time.Duration) (NegOutcome, error) {
	var out NegOutcome
	n, err := negentropy.New(items, negFrameLimit)
	if err != nil {
		return out, err
	}
	first, err := n.Initiate()
	if err != nil {
		return out, err
	}
	s, err := c.negOpen(filter, first)
	if err != nil {
		return out, err
	}
	defer c.negClose(s)
	for {
		r, err := c.negRecv(ctx, s, idle)
		if err != nil {
			return out, err
		}
		out.Rounds++
		out.Bytes += len(r.msg)
		switch {
		case r.lost != "":
			return out, fmt.Errorf("NIP-77 with %s: %w: %s", c.url, ErrConnClosed, r.lost)
		case r.notice != "":
			return out, fmt.Errorf("%w by %s: NOTICE %q", ErrNegRefused, c.url, r.notice)
		case r.negErr != "":
			return out, &NegError{Reason: r.negErr}
		}
		raw, err := hex.DecodeString(r.msg)
		if err != nil {
			return out, fmt.Errorf("NIP-77 with %s: NEG-MSG not hex: %w", c.url, err)
		}
		next, err := n.Reconcile(raw, &out.Have, &out.Need)
		if err != nil {
			return out, fmt.Errorf("NIP-77 with %s: %w", c.url, err)
		}
		if next == nil {
			return out, nil
		}
		if err := c.negSend(s, next); err != nil {
			return out, err
		}
	}
}
