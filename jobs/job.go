// Package jobs distributes crawl jobs over NATS JetStream: a work-queue
// stream of jobs shared by a fleet of archivers, each crawling into its own
// store, with job status in a KV bucket, progress events, and a status
// service. See docs/JOBS.md.
package jobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nostr-archiver/archiver/crawl"
	"github.com/nostr-archiver/archiver/discover"
)

// Modes of a job.
const (
	ModeBackfill = "backfill" // crawl the range once, then the job is done
	ModeLive     = "live"     // tail the relays until the worker stops; never done
)

// Limits of a job document.
const (
	MaxJobSize      = 64 << 10
	MaxRelays       = 64
	MaxIDLen        = 128
	DefaultPriority = 5
)

// ErrInvalidJob wraps every decode and validation error: the job can never
// run and must not be retried.
var ErrInvalidJob = errors.New("invalid job")

// Job is one unit of work on the queue. See docs/JOBS.md for the schema.
type Job struct {
	ID       string   `json:"id"`
	Relays   []string `json:"relays"`
	Filter   Filter   `json:"filter"`
	Mode     string   `json:"mode,omitempty"`
	Priority int      `json:"priority"`

	// Parent and Shard are set on the shard jobs a worker makes by
	// splitting a large backfill job: Shard is the part of the parent's
	// created_at range this job crawls.
	Parent string `json:"parent,omitempty"`
	Shard  *Range `json:"shard,omitempty"`

	// Found is set on a sweep job: a relay that discovery found in an
	// event, submitted by whichever nodes saw it (see SweepJob).
	Found *Found `json:"found,omitempty"`

	// Resolve looks up a relay's host for the private-target check;
	// default net.DefaultResolver. Tests inject their own.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error) `json:"-"`
}

// Filter selects the events a job archives. Until 0 means "now".
type Filter struct {
	Kinds   []int    `json:"kinds,omitempty"`
	Authors []string `json:"authors,omitempty"`
	Since   int64    `json:"since,omitempty"`
	Until   int64    `json:"until,omitempty"`
}

// Range is an inclusive created_at range.
type Range struct {
	Since int64 `json:"since"`
	Until int64 `json:"until"`
	// Open marks the newest shard of a job without until: it has no upper
	// bound (Until is where the split put "now"), so events dated in the
	// future are archived too.
	Open bool `json:"open,omitempty"`
}

// Found says how discovery learned a sweep job's relay.
type Found struct {
	How  string `json:"how"`  // discover.FromRelayList, ...
	From string `json:"from"` // the id of the event that named it (64 hex)
}

var (
	idRe    = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)
	shardRe = regexp.MustCompile(`^/s[0-9]{1,4}$`)
	howRe   = regexp.MustCompile(`^[a-z0-9-]{1,32}$`)
)

// SweepID is the id of the sweep job of a relay URL (discover.Normalize's
// form): the same
// on every node, so that the queue's dedup by message id makes the N
// nodes that discover a relay submit one job.
func SweepID(relay string) string {
	sum := sha256.Sum256([]byte(relay))
	return "relay-" + hex.EncodeToString(sum[:16])
}

// SweepJob is the job that crawls a discovered relay's whole history
// once, on one node of the fleet: it is never split (one node at a time
// per relay, and most discovered relays are small).
func SweepJob(relay, how, from string) (*Job, error) {
	u, ok := discover.Normalize(relay)
	if !ok {
		return nil, fmt.Errorf("%w: %q is not a relay URL", ErrInvalidJob, relay)
	}
	j := &Job{ID: SweepID(u), Relays: []string{u}, Mode: ModeBackfill, Priority: DefaultPriority, Found: &Found{How: how, From: from}}
	return j, j.check()
}

// ValidID reports whether id may name a submitted job. Dots may not lead,
// trail or repeat: the id is a KV key and a subject token.
func ValidID(id string) bool {
	return idRe.MatchString(id) && id[0] != '.' && id[len(id)-1] != '.' && !strings.Contains(id, "..")
}

// Decode parses and validates the shape of a job document (not its relay
// addresses: see Validate). Unknown fields, trailing data and documents
// over MaxJobSize are refused. A missing priority is DefaultPriority, a
// missing mode is backfill.
func Decode(data []byte) (*Job, error) {
	if len(data) > MaxJobSize {
		return nil, fmt.Errorf("%w: %d bytes > %d", ErrInvalidJob, len(data), MaxJobSize)
	}
	j := &Job{Priority: DefaultPriority}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(j); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the job object", ErrInvalidJob)
	}
	if j.Mode == "" {
		j.Mode = ModeBackfill
	}
	if err := j.check(); err != nil {
		return nil, err
	}
	return j, nil
}

// check validates everything but the relay hosts' addresses, naming every
// problem.
func (j *Job) check() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if j.Parent == "" {
		if !ValidID(j.ID) {
			bad("id %q: want [A-Za-z0-9._-]{1,128}, no leading, trailing or double dot", j.ID)
		}
		if j.Shard != nil {
			bad("shard without parent")
		}
	} else {
		rest, ok := strings.CutPrefix(j.ID, j.Parent)
		if !ValidID(j.Parent) || !ok || !shardRe.MatchString(rest) {
			bad("shard id %q: want <parent>/s<k> with a valid parent id", j.ID)
		}
		if j.Shard == nil {
			bad("shard job %q without shard range", j.ID)
		}
	}
	switch n := len(j.Relays); {
	case n == 0:
		bad("no relays")
	case n > MaxRelays:
		bad("%d relays > %d", n, MaxRelays)
	}
	seen := map[string]bool{}
	for _, r := range j.Relays {
		u, err := crawl.NormalizeURL(r)
		switch {
		case err != nil:
			bad("relay: %w", err)
		case seen[u]:
			bad("relay %q listed twice", r)
		}
		seen[u] = true
	}
	for _, k := range j.Filter.Kinds {
		if k < 0 || k > 65535 {
			bad("kind %d outside [0,65535]", k)
		}
	}
	for _, a := range j.Filter.Authors {
		if !crawl.ValidAuthor(a) {
			bad("author %q: want 64 lowercase hex", a)
		}
	}
	f := j.Filter
	if f.Since < 0 || f.Until < 0 {
		bad("since %d, until %d: want >= 0", f.Since, f.Until)
	}
	if f.Until != 0 && f.Until < f.Since {
		bad("until %d before since %d", f.Until, f.Since)
	}
	switch j.Mode {
	case ModeBackfill:
	case ModeLive:
		if f.Until != 0 {
			bad("live job with until %d: a tail has no end", f.Until)
		}
		if j.Shard != nil {
			bad("live shard job")
		}
	default:
		bad("mode %q: want %q or %q", j.Mode, ModeBackfill, ModeLive)
	}
	if fd := j.Found; fd != nil {
		if !howRe.MatchString(fd.How) || !crawl.ValidAuthor(fd.From) {
			bad("found %+v: want how [a-z0-9-]{1,32} and from 64 lowercase hex", *fd)
		}
		if len(j.Relays) == 1 {
			// One id per relay is what makes N submissions one job.
			if u, ok := discover.Normalize(j.Relays[0]); !ok {
				bad("sweep relay %q: want a ws:// or wss:// URL", j.Relays[0])
			} else if j.ID != SweepID(u) {
				bad("sweep job id %q: want %q", j.ID, SweepID(u))
			}
		} else {
			bad("sweep job with %d relays: want 1", len(j.Relays))
		}
		if j.Mode != ModeBackfill || j.Parent != "" {
			bad("sweep job: want a backfill and no parent")
		}
	}
	if j.Priority < 0 || j.Priority > 9 {
		bad("priority %d outside [0,9]", j.Priority)
	}
	if s := j.Shard; s != nil {
		if s.Since < f.Since || s.Until < s.Since || (f.Until != 0 && s.Until > f.Until) {
			bad("shard [%d,%d] is not a range inside the filter's", s.Since, s.Until)
		}
		if s.Open && f.Until != 0 {
			bad("open shard of a job with until %d", f.Until)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidJob, errors.Join(errs...))
	}
	return nil
}

// Validate checks the whole job, including that no relay is on a
// loopback, private, link-local, shared or unspecified address (as an IP
// literal or by resolving its name now) unless allowPrivate. A name that
// does not resolve is refused too. The check runs when the job is
// accepted: a name whose records change later is not re-checked at dial
// time.
func (j *Job) Validate(allowPrivate bool) error {
	if err := j.check(); err != nil {
		return err
	}
	if allowPrivate {
		return nil
	}
	resolve := j.Resolve
	if resolve == nil {
		resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	for _, r := range j.Relays {
		if err := checkTarget(ctx, r, resolve); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidJob, errors.Join(errs...))
	}
	return nil
}

func checkTarget(ctx context.Context, relay string, resolve func(context.Context, string) ([]netip.Addr, error)) error {
	norm, err := crawl.NormalizeURL(relay)
	if err != nil {
		return err
	}
	u, err := url.Parse(norm)
	if err != nil {
		return err
	}
	host := u.Hostname()
	addrs := []netip.Addr{}
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = append(addrs, a)
	} else if addrs, err = resolve(ctx, host); err != nil {
		return fmt.Errorf("relay %q: resolve %s: %w", relay, host, err)
	} else if len(addrs) == 0 {
		return fmt.Errorf("relay %q: %s has no addresses", relay, host)
	}
	for _, a := range addrs {
		if discover.PrivateAddr(a) {
			return fmt.Errorf("relay %q: %s is a private target (%s)", relay, host, a)
		}
	}
	return nil
}

// shardID names shard k of job id.
func shardID(id string, k int) string { return id + "/s" + strconv.Itoa(k) }

// crawlRange is the created_at range this job crawls: its shard, else its
// filter (until 0: now, and no upper bound).
func (j *Job) crawlRange() (since, until int64) {
	if j.Shard != nil {
		if j.Shard.Open {
			return j.Shard.Since, 0
		}
		return j.Shard.Since, j.Shard.Until
	}
	return j.Filter.Since, j.Filter.Until
}
