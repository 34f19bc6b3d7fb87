package interop

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/schnorr"
	"github.com/nostr-archiver/archiver/event"
	"golang.org/x/sync/errgroup"
)

// fixture is a set of events laid out over created_at so that the crawl
// must page many times, re-read seconds cut by a page boundary (their
// order within a second is up to the relay), and complete walls.
type fixture struct {
	events []*event.Event // unsigned until sign
	keys   []*btcec.PrivateKey
	author []int // index into keys, per event
	// Seconds holding more events than a 100-event page: one that
	// splits by kind, one that needs kind+author.
	wallByKind, wallByAuthor int64
}

const (
	fixtureSeed = 0x1d2e3f // deterministic: a failure reproduces
	fixtureBase = int64(1_700_000_000)
	fixtureSpan = 1500 // seconds
	fixtureKeys = 6
)

// Content that a serializer can get wrong: NIP-01 escapes, control
// characters, non-ASCII, HTML, a long string.
var fixtureContent = []string{
	"plain ascii",
	"two\nlines\r\nand a\ttab",
	`quote " backslash \ slash /`,
	"accents éàüß, emoji 🤙🏽, CJK 日本語",
	"control \x01\x1f\x7f and \b\f",
	"separators \u2028 \u2029 stay verbatim",
	"<script>alert(1)</script> & <b>html</b>",
	strings.Repeat("long content ", 250),
	"",
}

var fixtureKinds = []int{1, 6, 7, 16, 1111, 9802} // regular (stored) kinds

func newFixture(n int) *fixture {
	rng := rand.New(rand.NewPCG(fixtureSeed, fixtureSeed))
	keys := make([]*btcec.PrivateKey, fixtureKeys)
	pubs := make([]string, fixtureKeys)
	for i := range keys {
		seed := sha256.Sum256(binary.BigEndian.AppendUint64([]byte("interop key"), uint64(i)))
		keys[i], _ = btcec.PrivKeyFromBytes(seed[:])
		pubs[i] = hex.EncodeToString(keys[i].PubKey().SerializeCompressed()[1:])
	}
	f := &fixture{keys: keys, wallByKind: fixtureBase + 400, wallByAuthor: fixtureBase + 900}

	// Per-event seconds: two walls, a few busy seconds (ties, below a
	// page), the rest uniform (about 1.7 events a second, many ties).
	seconds := make([]int64, 0, n)
	for range 180 {
		seconds = append(seconds, f.wallByKind)
	}
	for range 260 {
		seconds = append(seconds, f.wallByAuthor)
	}
	busy := make([]int64, 30)
	for i := range busy {
		busy[i] = fixtureBase + int64(rng.IntN(fixtureSpan))
	}
	for len(seconds) < n {
		s := fixtureBase + int64(rng.IntN(fixtureSpan))
		if rng.IntN(10) < 2 {
			s = busy[rng.IntN(len(busy))]
		}
		if s == f.wallByKind || s == f.wallByAuthor {
			continue
		}
		seconds = append(seconds, s)
	}
	// Publish in a random order so no second arrives contiguously. The
	// relay serves a second newest-inserted first, so shuffled, every kind
	// and author of a wall shows on the wall's first page: the crawler's
	// wall split can only split by kinds and authors it has seen.
	rng.Shuffle(len(seconds), func(i, j int) { seconds[i], seconds[j] = seconds[j], seconds[i] })

	for i, s := range seconds {
		e := &event.Event{
			CreatedAt: s,
			Kind:      fixtureKinds[rng.IntN(len(fixtureKinds))],
			Content:   fmt.Sprintf("#%d %s", i, fixtureContent[rng.IntN(len(fixtureContent))]),
		}
		switch s {
		case f.wallByKind:
			e.Kind = fixtureKinds[rng.IntN(3)] // ~60 a kind: a kind split finishes
		case f.wallByAuthor:
			e.Kind = 1 // 260 of one kind: only authors split it
		}
		switch rng.IntN(4) {
		case 1:
			e.Tags = [][]string{{"t", "interop"}}
		case 2:
			e.Tags = [][]string{{"p", pubs[rng.IntN(fixtureKeys)]}, {"client", "archiver-interop", ""}}
		case 3:
			var ref [32]byte
			binary.BigEndian.PutUint64(ref[:], rng.Uint64())
			e.Tags = [][]string{{"e", hex.EncodeToString(ref[:]), "wss://relay.example", "reply"}}
		}
		f.events = append(f.events, e)
		f.author = append(f.author, rng.IntN(fixtureKeys))
	}
	return f
}

// sign signs the events on GOMAXPROCS goroutines, sending each to out as
// it is ready (in no particular order), and closes out. Signing overlaps
// publishing. It is event.Sign with each key's pubkey derived once and
// without btcec's check of every signature it makes (schnorr.FastSign):
// under -race those were 85% of the signing, 20 s of CPU for 3000
// events; the relay and the archive verify every signature anyway.
func (f *fixture) sign(ctx context.Context, out chan<- *event.Event) error {
	defer close(out)
	pubs := make([][32]byte, len(f.keys))
	for i, k := range f.keys {
		pubs[i] = [32]byte(schnorr.SerializePubKey(k.PubKey()))
	}
	var next atomic.Int64
	g, ctx := errgroup.WithContext(ctx)
	for range runtime.GOMAXPROCS(0) {
		g.Go(func() error {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(f.events) {
					return nil
				}
				e := f.events[i]
				e.PubKey = pubs[f.author[i]]
				e.ID, _ = e.ComputeID(nil)
				sig, err := schnorr.Sign(f.keys[f.author[i]], e.ID[:], schnorr.FastSign())
				if err != nil {
					return fmt.Errorf("sign event %d: %w", i, err)
				}
				e.Sig = [64]byte(sig.Serialize())
				select {
				case out <- e:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		})
	}
	return g.Wait()
}
