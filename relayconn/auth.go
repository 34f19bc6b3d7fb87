package relayconn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nostr-archiver/archiver/bip340"
	"github.com/nostr-archiver/archiver/event"
	"github.com/nostr-archiver/archiver/frame"
)

// NIP-42 as a client. A relay's ["AUTH", challenge] is remembered; only
// when a REQ or COUNT is CLOSED with auth-required does the crawl answer
// it, with a kind-22242 event naming the relay and the challenge, wait for
// the relay's OK, and re-send what was closed. A relay that then answers
// restricted: (the key is not one it serves), rejects the AUTH, or still
// wants AUTH finishes with that reason; so does one that wants AUTH when
// no key was given. The key is never logged: only its public key is.

// KindAuth is the NIP-42 client authentication event kind.
const KindAuth = 22242

// ErrAuthRejected wraps the reason of a relay's ["OK", id, false, reason]
// to our AUTH.
var ErrAuthRejected = errors.New("relay rejected AUTH")

// connAuth is a connection's NIP-42 state, guarded by Conn.mu.
type connAuth struct {
	authed    bool
	pubkey    [32]byte
	challenge chan struct{} // closed once a challenge has arrived; made lazily
	got       bool          // challenge is closed
	lock      chan struct{} // one AUTH at a time; made lazily
	waiting   map[[32]byte]pendingAuth
}

// pendingAuth is an AUTH event sent and not yet answered.
type pendingAuth struct {
	pubkey [32]byte
	answer chan frame.Msg // buffered 1, sent once
}

// challenged notes a challenge. Caller holds Conn.mu.
func (a *connAuth) challenged() {
	if a.challenge == nil {
		a.challenge = make(chan struct{})
	}
	if !a.got {
		a.got = true
		close(a.challenge)
	}
}

// ok hands an OK frame to the AUTH waiting for it. The connection counts
// as authenticated from here, in frame order: a refusal that follows the
// OK must see it so. Caller holds Conn.mu.
func (a *connAuth) ok(m frame.Msg) {
	if p, ok := a.waiting[m.ID]; ok {
		delete(a.waiting, m.ID)
		if m.Accepted {
			a.authed, a.pubkey = true, p.pubkey
		}
		p.answer <- m
	}
}

// Authed reports whether the relay accepted our AUTH on this connection.
func (c *Conn) Authed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.auth.authed
}

// AuthedAs reports whether the relay accepted our AUTH on this
// connection, and for which public key.
func (c *Conn) AuthedAs() (bool, [32]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.auth.authed, c.auth.pubkey
}

// Authenticate answers the relay's challenge with key and waits, at most
// timeout for the challenge and as long again for the relay's OK. Callers
// that race (several REQs closed at once) share one AUTH: the later ones
// return nil once it is accepted, with sent false. An OK false wraps
// ErrAuthRejected.
func (c *Conn) Authenticate(ctx context.Context, key *bip340.PrivateKey, timeout time.Duration) (sent bool, err error) {
	c.mu.Lock()
	if c.auth.lock == nil {
		c.auth.lock = make(chan struct{}, 1)
	}
	if c.auth.challenge == nil {
		c.auth.challenge = make(chan struct{})
	}
	lock, challenged := c.auth.lock, c.auth.challenge
	c.mu.Unlock()
	select {
	case lock <- struct{}{}:
		defer func() { <-lock }()
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if c.Authed() {
		return false, nil
	}
	return true, c.authenticate(ctx, key, timeout, challenged)
}

// authenticate sends one AUTH and waits for its OK. Caller holds the
// connection's AUTH lock.
func (c *Conn) authenticate(ctx context.Context, key *bip340.PrivateKey, timeout time.Duration, challenged <-chan struct{}) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-challenged:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return fmt.Errorf("AUTH to %s: %w", c.url, ErrConnClosed)
	case <-t.C:
		return fmt.Errorf("AUTH to %s: the relay asked for AUTH but sent no challenge within %v", c.url, timeout)
	}
	e := &event.Event{
		PubKey: key.PublicKey(), CreatedAt: time.Now().Unix(), Kind: KindAuth,
		Tags: [][]string{{"relay", c.url}, {"challenge", c.Challenge()}},
	}
	e.ID, _ = e.ComputeID(nil)
	var err error
	if e.Sig, err = key.Sign(&e.ID); err != nil {
		return fmt.Errorf("AUTH to %s: %w", c.url, err)
	}
	answer := make(chan frame.Msg, 1)
	c.mu.Lock()
	if c.auth.waiting == nil {
		c.auth.waiting = map[[32]byte]pendingAuth{}
	}
	c.auth.waiting[e.ID] = pendingAuth{pubkey: e.PubKey, answer: answer}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.auth.waiting, e.ID)
		c.mu.Unlock()
	}()
	msg := append([]byte(`["AUTH",`), event.AppendJSON(nil, e)...)
	if err := c.write(append(msg, ']')); err != nil {
		return fmt.Errorf("AUTH to %s: %w", c.url, err)
	}
	t.Reset(timeout)
	select {
	case m := <-answer:
		if !m.Accepted {
			return fmt.Errorf("%w: %s", ErrAuthRejected, m.Message)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return fmt.Errorf("AUTH to %s: %w", c.url, ErrConnClosed)
	case <-t.C:
		return fmt.Errorf("AUTH to %s: no OK within %v", c.url, timeout)
	}
}
