package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nostr-archiver/archiver/discover"
	"github.com/nostr-archiver/archiver/jobs"
	"go.uber.org/zap"
)

// sweeper hands discovered relays to the fleet: with [nats] and
// [discover] both on, a relay that discovery admits becomes a sweep job on
// the shared queue (jobs.SweepJob) instead of a relay of this node, so
// that the fleet crawls each relay once, on whichever node takes the job.
// Discovery runs in the verify pool's callback, which must not wait on
// NATS: the jobs wait here until a connection submits them.
type sweeper struct {
	mu      sync.Mutex
	pending []*jobs.Job
	wake    chan struct{}
	// Counters for /status: jobs this node submitted, and submissions the
	// queue dropped as duplicates (another node, or an earlier run of this
	// one, submitted the relay first).
	submitted, duplicates int
	// claims are configured relays whose sweep ids this node has still
	// to claim (jobs.Claim), so that the fleet does not crawl them again.
	claims []string
}

func newSweeper() *sweeper { return &sweeper{wake: make(chan struct{}, 1)} }

func (s *sweeper) add(j *jobs.Job) {
	s.mu.Lock()
	s.pending = append(s.pending, j)
	s.mu.Unlock()
	s.poke()
}

func (s *sweeper) claim(urls []string) {
	s.mu.Lock()
	s.claims = append(s.claims, configuredClaims(urls)...)
	s.mu.Unlock()
	s.poke()
}

func (s *sweeper) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// state is the sweeper's part of /status.
func (s *sweeper) state() *SweepState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &SweepState{Pending: len(s.pending), Submitted: s.submitted, Duplicates: s.duplicates}
}

// SweepState counts the sweep jobs of the relays this node discovered.
type SweepState struct {
	Pending    int `json:"pending"`    // waiting for NATS
	Submitted  int `json:"submitted"`  // new jobs on the queue
	Duplicates int `json:"duplicates"` // dropped by the queue: already submitted
}

// run claims the configured relays' sweep ids and submits the pending
// jobs, as they come, until ctx ends or NATS fails (the caller retries;
// what was not done stays pending).
func (s *sweeper) run(ctx context.Context, js jetstream.JetStream, subj jobs.Subjects, node string, log *zap.Logger) error {
	for {
		s.mu.Lock()
		claims, batch := s.claims, s.pending
		s.claims, s.pending = nil, nil
		s.mu.Unlock()
		for i, u := range claims {
			if _, err := jobs.Claim(ctx, js, subj, u, node); err != nil {
				s.mu.Lock()
				s.claims = append(claims[i:], s.claims...)
				s.pending = append(batch, s.pending...)
				s.mu.Unlock()
				return err
			}
		}
		for i, j := range batch {
			dup, err := jobs.Submit(ctx, js, subj, j)
			if err != nil {
				s.mu.Lock()
				s.pending = append(batch[i:], s.pending...)
				s.mu.Unlock()
				return err
			}
			s.mu.Lock()
			if dup {
				s.duplicates++
			} else {
				s.submitted++
			}
			s.mu.Unlock()
			log.Debug("sweep job submitted", zap.String("relay", j.Relays[0]), zap.String("job", j.ID), zap.Bool("duplicate", dup))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		}
	}
}

// sweepLocked queues the sweep job of a relay discovery admitted. Caller
// holds d.mu.
func (d *Daemon) sweepLocked(u string, f *Discovered) {
	j, err := jobs.SweepJob(u, f.How, f.From)
	if err != nil { // discovery normalized u: not expected
		d.log.Warn("no sweep job for a discovered relay", zap.String("relay", u), zap.Error(err))
		return
	}
	d.swept[u] = true
	d.nDiscovered++
	d.sweep.add(j)
}

// configuredClaims are the configured relays in discovery's form.
func configuredClaims(urls []string) []string {
	var out []string
	for _, raw := range urls {
		if u, ok := discover.Normalize(raw); ok {
			out = append(out, u)
		}
	}
	return out
}

// runSweep runs the sweeper beside a job worker, on the same connection,
// until ctx ends or it fails; a failure is logged and retried after a
// pause while the worker keeps running.
func (d *Daemon) runSweep(ctx context.Context, js jetstream.JetStream, subj jobs.Subjects, node string, log *zap.Logger) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 && !sleep(ctx, min(time.Duration(attempt)*time.Second, time.Minute)) {
			return
		}
		if err := d.sweep.run(ctx, js, subj, node, log); err != nil && ctx.Err() == nil {
			log.Warn("submitting sweep jobs; retrying", zap.Error(err))
		}
	}
}
