package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/nostr-archiver/archiver/crawl"
)

// States of a job or shard status record.
const (
	StateQueued  = "queued"  // submitted, not yet taken
	StateRunning = "running" // a node holds it
	StateSplit   = "split"   // a parent whose work is its shard jobs
	StateDone    = "done"    // finished: see Finish
	StateFailed  = "failed"  // will not run again: see Error
)

// FinishInvalid is the finish of a job refused by Decode or Validate.
const FinishInvalid = "invalid"

// FinishConfigured is the finish of a sweep job's record that a node
// claimed for a relay of its own configuration (see Claim).
const FinishConfigured = "configured"

// Sentinels of the client helpers.
var (
	ErrJobNotFound = errors.New("job not found")
	ErrNotDrained  = errors.New("job finished without draining every relay")
)

// Status is the record of one job or shard in the status bucket, under
// its id.
type Status struct {
	ID     string `json:"id"`
	Parent string `json:"parent,omitempty"`
	State  string `json:"state"`
	Node   string `json:"node,omitempty"`   // the node that holds or held it
	Finish string `json:"finish,omitempty"` // drained, incomplete-walls, ..., invalid: the worst relay's
	Error  string `json:"error,omitempty"`
	Events int64  `json:"events"` // ids new to the node's store from the job's relays while it ran
	// Relays are the per-relay outcomes of the last run.
	Relays []RelayResult `json:"relays,omitempty"`
	// Shards are the shard jobs of a split parent.
	Shards     []ShardRef `json:"shards,omitempty"`
	Deliveries uint64     `json:"deliveries,omitempty"` // how many times the queue delivered it
	Updated    time.Time  `json:"updated"`
}

// RelayResult is one relay's outcome within a job.
type RelayResult struct {
	Relay  string `json:"relay"`
	Finish string `json:"finish"`
	Detail string `json:"detail,omitempty"`
	Events int64  `json:"events"`
}

// ShardRef names one shard job of a split.
type ShardRef struct {
	ID string `json:"id"`
	Range
}

func (s *Status) encode() []byte {
	b, _ := json.Marshal(s)
	return b
}

// Report is a job's status with its shards', as the status service
// answers it.
type Report struct {
	Job    Status   `json:"job"`
	Shards []Status `json:"shards,omitempty"`
	Nodes  []string `json:"nodes"`   // every node that holds or held a part
	Done   bool     `json:"done"`    // every part is done or failed
	Drain  bool     `json:"drained"` // every part is done and drained
}

func getStatus(ctx context.Context, kv jetstream.KeyValue, id string) (*Status, error) {
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrJobNotFound, id)
	}
	if err != nil {
		return nil, err
	}
	var st Status
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return nil, fmt.Errorf("status of %s: %w", id, err)
	}
	return &st, nil
}

// report gathers a job's status and its shards'.
func report(ctx context.Context, kv jetstream.KeyValue, id string) (*Report, error) {
	st, err := getStatus(ctx, kv, id)
	if err != nil {
		return nil, err
	}
	r := &Report{Job: *st}
	parts := []Status{*st}
	if st.State == StateSplit {
		parts = parts[:0]
		for _, sh := range st.Shards {
			s, err := getStatus(ctx, kv, sh.ID)
			if errors.Is(err, ErrJobNotFound) {
				s = &Status{ID: sh.ID, Parent: id, State: StateQueued}
			} else if err != nil {
				return nil, err
			}
			parts = append(parts, *s)
		}
		r.Shards = parts
	}
	r.Done, r.Drain = true, true
	for _, p := range parts {
		if p.Node != "" && !slices.Contains(r.Nodes, p.Node) {
			r.Nodes = append(r.Nodes, p.Node)
		}
		finished := p.State == StateDone || p.State == StateFailed
		r.Done = r.Done && finished
		r.Drain = r.Drain && p.State == StateDone && p.Finish == crawl.FinishDrained
	}
	slices.Sort(r.Nodes)
	return r, nil
}

type jobRequest struct {
	ID string `json:"id"`
}

// JobStatus asks the status service for job id's report.
func JobStatus(ctx context.Context, nc *nats.Conn, s Subjects, id string) (*Report, error) {
	req, _ := json.Marshal(jobRequest{ID: id})
	msg, err := nc.RequestWithContext(ctx, s.StatusJob(), req)
	if err != nil {
		return nil, fmt.Errorf("jobs: status of %s: %w", id, err)
	}
	if e := msg.Header.Get(micro.ErrorHeader); e != "" {
		if msg.Header.Get(micro.ErrorCodeHeader) == "404" {
			return nil, fmt.Errorf("%w: %s", ErrJobNotFound, id)
		}
		return nil, fmt.Errorf("jobs: status of %s: %s", id, e)
	}
	var r Report
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return nil, fmt.Errorf("jobs: status of %s: %w", id, err)
	}
	return &r, nil
}

// ListJobs returns every status record (jobs and shards), by id.
func ListJobs(ctx context.Context, js jetstream.JetStream, s Subjects) ([]Status, error) {
	kv, err := js.KeyValue(ctx, s.Bucket())
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	keys, err := kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	slices.Sort(keys)
	out := make([]Status, 0, len(keys))
	for _, k := range keys {
		st, err := getStatus(ctx, kv, k)
		if errors.Is(err, ErrJobNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("jobs: %w", err)
		}
		out = append(out, *st)
	}
	return out, nil
}

// Wait blocks until job id and all its shards are done or failed (or ctx
// ends) and returns its report: a nil error only if every part drained,
// else ErrNotDrained. A job not yet recorded is waited for.
func Wait(ctx context.Context, js jetstream.JetStream, s Subjects, id string, poll time.Duration) (*Report, error) {
	kv, err := js.KeyValue(ctx, s.Bucket())
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	if poll <= 0 {
		poll = time.Second
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		r, err := report(ctx, kv, id)
		switch {
		case err == nil && r.Done && r.Drain:
			return r, nil
		case err == nil && r.Done:
			return r, fmt.Errorf("jobs: %s: %w", id, ErrNotDrained)
		case err != nil && !errors.Is(err, ErrJobNotFound):
			return nil, fmt.Errorf("jobs: %w", err)
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-t.C:
		}
	}
}
