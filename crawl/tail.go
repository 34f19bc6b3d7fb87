package crawl

import (
	"context"
	"fmt"
	"time"

	"github.com/nostr-archiver/archiver/rawstore"
	"github.com/nostr-archiver/archiver/relayconn"
	"go.uber.org/zap"
)

// TailOptions configure a live tail.
type TailOptions struct {
	Since int64 // created_at to start from
	// Floor is the job's oldest created_at: events published while the
	// tail is connected are stored whatever their created_at down to it
	// (0: no floor).
	Floor   int64
	Overlap time.Duration // on reconnect, resume this long before the newest event seen; default 10m
	Flush   time.Duration // how often arrived events are committed; default 500ms
	// MaxBuffered bounds events held between flushes; default 20000.
	MaxBuffered int
}

// Tail keeps a subscription to relay open from opts.Since on, storing
// what arrives, and returns only when ctx ends (nil) or the relay refuses
// for good (auth-required, blocked:, restricted:). Dropped connections
// and refusals reconnect with backoff and full jitter, resuming from the
// newest created_at seen (once the relay's stored events are all in)
// minus the overlap; ids dedup what is fetched twice. Events published
// with an older created_at (backdated: a client sending a user's history
// to a relay the user just added, a rebroadcast) are stored if they
// arrive while the tail is connected; those published while it is not are
// past its reach.
func (c *Crawler) Tail(ctx context.Context, relay string, opts TailOptions) error {
	url, err := NormalizeURL(relay)
	if err != nil {
		return err
	}
	if opts.Overlap == 0 {
		opts.Overlap = 10 * time.Minute
	}
	if opts.Flush == 0 {
		opts.Flush = 500 * time.Millisecond
	}
	if opts.MaxBuffered == 0 {
		opts.MaxBuffered = 20000
	}
	idx, err := c.opts.Store.RelayIndex(url)
	if err != nil {
		return err
	}
	log := c.opts.Logger.With(zap.String("relay", url), zap.String("mode", "tail"))
	rm := c.opts.Metrics.forRelay(url)
	hwm := opts.Since
	sendLive := true // send the second filter (below) until the relay refuses it
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			if err := c.backoff(ctx, min(attempt, 8)); err != nil {
				return nil
			}
		}
		conn, err := relayconn.Dial(ctx, url, c.opts.dialOptions())
		if err != nil {
			log.Info("tail connect failed", zap.Error(err), zap.Int("attempt", attempt))
			continue
		}
		rm.conns.Inc()
		since := max(opts.Since, hwm-int64(opts.Overlap/time.Second))
		// Two filters: the stored events from the resume point on, and
		// (limit 0: none stored) every event published from now on,
		// whatever its created_at. With the first alone a relay pushes no
		// backdated event: it is older than the filter's since.
		f := c.opts.jobFilter(&since, nil, 0).bytes()
		if sendLive {
			var floor *int64
			if opts.Floor > 0 {
				floor = &opts.Floor
			}
			f = append(append(f, ','), c.opts.jobFilter(floor, nil, 0).liveOnly()...)
		}
		log.Info("tail subscribed", zap.Int64("since", since))
		// The stored events before EOSE come newest first: if the
		// connection drops among them, the older ones have not come yet,
		// so the resume point moves only once EOSE has arrived.
		var replayMax int64
		store := func(items []relayconn.Item, bad []relayconn.Malformed, eose bool) error {
			b := &rawstore.Batch{Relay: idx, Malformed: toStore(bad), Events: make([]rawstore.Copy, len(items))}
			bytes := 0
			for i, it := range items {
				b.Events[i] = storeCopy(it)
				// A far-future event must not move the resume point past now.
				replayMax = max(replayMax, min(it.CreatedAt, c.opts.Now().Unix()))
				bytes += len(it.Raw)
			}
			if eose {
				hwm = max(hwm, replayMax)
			}
			if err := c.opts.Pause(ctx); err != nil {
				return err
			}
			rm.events.Add(float64(len(items)))
			rm.bytes.Add(float64(bytes))
			if _, err := c.opts.Store.Ingest(b); err != nil {
				return err
			}
			c.opts.OnCommit()
			attempt = 0 // it works again: start backoff afresh after the next loss
			return nil
		}
		page, err := conn.Stream(ctx, f, opts.Flush, opts.MaxBuffered, store)
		if c.authAnswered(ctx, conn, url, page, err) {
			page, err = conn.Stream(ctx, f, opts.Flush, opts.MaxBuffered, store)
		}
		conn.Close()
		rm.conns.Dec()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			log.Warn("tail stopped", zap.Error(err))
		case page.End == relayconn.EndClosed:
			if act, _ := classify(page.Reason); act == actAuth || act == actGiveUp {
				return fmt.Errorf("tail %s: %s", url, page.Reason)
			}
			rm.refusal("closed")
			log.Info("tail closed by relay", zap.String("reason", page.Reason))
			if sendLive && !page.EOSE {
				// Refused outright: perhaps the limit-0 filter (a relay
				// reading 0 as a bad limit). Backdated events are then
				// left to the daemon's recheck.
				sendLive = false
				log.Warn("the relay closed the tail's REQ before its EOSE; tailing without the filter for backdated events", zap.String("reason", page.Reason))
			}
		default:
			rm.refusal(page.End.String())
			log.Info("tail interrupted", zap.Stringer("end", page.End), zap.String("reason", page.Reason))
		}
	}
	return nil
}

// authAnswered reports whether a live subscription closed with
// auth-required was answered with the relay's key on conn, so that it can
// be sent again there.
func (c *Crawler) authAnswered(ctx context.Context, conn *relayconn.Conn, url string, page *relayconn.Page, err error) bool {
	if err != nil || page.End != relayconn.EndClosed || page.SentAuthed {
		return false
	}
	key := c.opts.AuthKeys.For(url)
	if act, _ := classify(page.Reason); act != actAuth || key == nil {
		return false
	}
	if _, err := conn.Authenticate(ctx, key, c.opts.PageTimeout); err != nil {
		c.opts.Logger.Info("tail AUTH failed", zap.String("relay", url), zap.Error(err))
		return false
	}
	return true
}
