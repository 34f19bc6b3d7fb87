package crawl

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/nostr-archiver/archiver/relayconn"
	"go.uber.org/zap"
)

// authStep is what a crawl does after a REQ or COUNT closed with
// auth-required.
type authStep uint8

const (
	authResend authStep = iota // authenticated: re-send what was closed
	authRetry                  // the AUTH failed in passing (timeout, lost connection): count a failure, retry
	authStop                   // the relay's crawl has been ended with the reason
)

// answerAuth handles a page closed with auth-required on pc: it
// authenticates the connection with the relay's key, or ends the relay's
// crawl when there is no key, the relay rejects it, or the relay wanted
// AUTH even after accepting it.
func (r *relayCrawl) answerAuth(ctx context.Context, pc *poolConn, page *relayconn.Page) authStep {
	key := r.c.opts.AuthKeys.For(r.url)
	switch {
	case key == nil:
		r.fail(FinishAuthRequired, page.Reason+" (no key given)")
		return authStop
	case page.SentAuthed:
		pub := key.PublicKey()
		r.fail(FinishAuthRequired, fmt.Sprintf("%s (after the relay accepted AUTH as pubkey %s)", page.Reason, hex.EncodeToString(pub[:])))
		return authStop
	}
	sent, err := pc.c.Authenticate(ctx, key, r.c.opts.PageTimeout)
	pub := key.PublicKey()
	switch {
	case err == nil:
		if sent {
			r.noteAuth()
			r.log.Debug("authenticated", zap.String("pubkey", hex.EncodeToString(pub[:])))
		}
		return authResend
	case ctx.Err() != nil:
		return authStop
	case errors.Is(err, relayconn.ErrAuthRejected):
		r.fail(FinishAuthRejected, fmt.Sprintf("pubkey %s: %v", hex.EncodeToString(pub[:]), err))
		return authStop
	}
	r.log.Info("AUTH failed; retrying", zap.Error(err))
	r.refusal("auth-failed", 0)
	r.conns.drop(pc)
	return authRetry
}

// noteAuth counts an accepted AUTH in the relay's record.
func (r *relayCrawl) noteAuth() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rec.Auths++
}

// restrictedDetail is a restricted: refusal's detail: which key, if any,
// the relay turned away.
func (r *relayCrawl) restrictedDetail(pc *poolConn, reason string) string {
	authed, pub := pc.c.AuthedAs()
	if !authed {
		return reason + " (not authenticated)"
	}
	return fmt.Sprintf("%s (authenticated as pubkey %s)", reason, hex.EncodeToString(pub[:]))
}
