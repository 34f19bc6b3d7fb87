package testrelay

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/btcsuite/btcd/btcec/v2/schnorr"
	"github.com/nostr-archiver/archiver/event"
)

// KindAuth is the NIP-42 client authentication event kind.
const KindAuth = 22242

// authWindow is how far an AUTH event's created_at may be from now.
const authWindow = 10 * time.Minute

// onAuth checks a NIP-42 AUTH event and answers OK true or false.
func (c *conn) onAuth(raw json.RawMessage) {
	id, pub, err := c.verifyAuth(raw, time.Now())
	if err != nil {
		c.r.st.authFail.Add(1)
		c.sendMsg("OK", id, false, "invalid: "+err.Error())
		return
	}
	c.authed, c.authAs = true, pub
	c.r.st.authOK.Add(1)
	c.sendMsg("OK", id, true, "")
}

// verifyAuth returns the event's id (as claimed, for the OK), its pubkey,
// and why it does not authenticate this connection, if it does not.
func (c *conn) verifyAuth(raw []byte, now time.Time) (id, pub string, err error) {
	e, err := event.Parse(raw)
	if err != nil {
		var loose struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(raw, &loose)
		return loose.ID, "", errors.New("malformed event")
	}
	id = hex.EncodeToString(e.ID[:])
	if e.Kind != KindAuth {
		return id, "", errors.New("not a kind 22242 event")
	}
	if d := now.Sub(time.Unix(e.CreatedAt, 0)); d > authWindow || d < -authWindow {
		return id, "", errors.New("created_at too far from now")
	}
	var relayOK, challengeOK bool
	for _, t := range e.Tags {
		if len(t) < 2 {
			continue
		}
		switch t[0] {
		case "relay":
			relayOK = relayOK || sameRelayURL(t[1], c.r.url)
		case "challenge":
			challengeOK = challengeOK || t[1] == c.challenge
		}
	}
	if !challengeOK {
		return id, "", errors.New("wrong or missing challenge tag")
	}
	if !relayOK {
		return id, "", errors.New("wrong or missing relay tag")
	}
	if want, _ := e.ComputeID(nil); want != e.ID {
		return id, "", errors.New("id does not match the event")
	}
	pk, err := schnorr.ParsePubKey(e.PubKey[:])
	if err != nil {
		return id, "", errors.New("bad pubkey")
	}
	sig, err := schnorr.ParseSignature(e.Sig[:])
	if err != nil || !sig.Verify(e.ID[:], pk) {
		return id, "", errors.New("bad signature")
	}
	return id, hex.EncodeToString(e.PubKey[:]), nil
}

// sameRelayURL compares relay URLs ignoring case and a trailing slash.
func sameRelayURL(a, b string) bool {
	norm := func(s string) string { return strings.TrimRight(strings.ToLower(s), "/") }
	return norm(a) == norm(b)
}
