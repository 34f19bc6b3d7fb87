package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nostr-archiver/archiver/config"
)

// Subjects names the stream, bucket and subjects of one archiver fleet.
type Subjects struct {
	Prefix string // default "archiver"
	Stream string // default "ARCHIVER_JOBS"
}

// SubjectsFrom reads the names from the [nats] configuration.
func SubjectsFrom(cfg config.NATS) Subjects {
	return Subjects{Prefix: cfg.SubjectPrefix, Stream: cfg.Stream}.withDefaults()
}

func (s Subjects) withDefaults() Subjects {
	if s.Prefix == "" {
		s.Prefix = "archiver"
	}
	if s.Stream == "" {
		s.Stream = "ARCHIVER_JOBS"
	}
	return s
}

// Submit is where users publish jobs; ShardSubject where workers publish
// the shard jobs of a split; both are on the work-queue stream.
func (s Subjects) Submit() string       { return s.withDefaults().Prefix + ".jobs.submit" }
func (s Subjects) ShardSubject() string { return s.withDefaults().Prefix + ".jobs.shard" }
func (s Subjects) jobsWildcard() string { return s.withDefaults().Prefix + ".jobs.>" }

// Progress is the subject of a job's progress events (shards included).
func (s Subjects) Progress(jobID string) string {
	return s.withDefaults().Prefix + ".progress." + jobID
}

// StatusJob and StatusNode are the status service's endpoints.
func (s Subjects) StatusJob() string  { return s.withDefaults().Prefix + ".status.job" }
func (s Subjects) StatusNode() string { return s.withDefaults().Prefix + ".status.node" }

// Bucket is the KV bucket of job status records.
func (s Subjects) Bucket() string { return s.withDefaults().Stream + "_STATUS" }

// Consumer is the durable pull consumer all workers share.
func (s Subjects) Consumer() string { return "workers" }

// DedupWindow is how long the stream remembers a job id: a second
// submission within it is dropped by the server. Later, a worker still
// skips a job whose status record says it is done.
const DedupWindow = 24 * time.Hour

// EnsureStream creates (or updates) the work-queue stream and the status
// bucket. Each is created first, which the server answers without a
// change when it exists as configured, and updated only when its
// configuration differs: every node ensures them at start, and an update
// of an unchanged stream raced, inside nats-server, with another node's
// consumer being created on it (seen under -race in the fleet tests).
func EnsureStream(ctx context.Context, js jetstream.JetStream, s Subjects) (jetstream.Stream, jetstream.KeyValue, error) {
	s = s.withDefaults()
	scfg := jetstream.StreamConfig{
		Name:        s.Stream,
		Description: "archiver crawl jobs",
		Subjects:    []string{s.jobsWildcard()},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  DedupWindow,
		MaxMsgSize:  MaxJobSize,
	}
	st, err := js.CreateStream(ctx, scfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		st, err = js.UpdateStream(ctx, scfg)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("jobs: stream %s: %w", s.Stream, err)
	}
	kcfg := jetstream.KeyValueConfig{
		Bucket:      s.Bucket(),
		Description: "archiver job status",
		History:     1,
		Storage:     jetstream.FileStorage,
	}
	kv, err := js.CreateKeyValue(ctx, kcfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.UpdateKeyValue(ctx, kcfg)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("jobs: bucket %s: %w", s.Bucket(), err)
	}
	return st, kv, nil
}

// Submit publishes j (which must be valid) to the queue with its id as
// the message id: a second submission of the same id within DedupWindow
// is collapsed by the server and reported as dup. A new job gets a queued
// status record.
func Submit(ctx context.Context, js jetstream.JetStream, s Subjects, j *Job) (dup bool, err error) {
	if err := j.check(); err != nil {
		return false, err
	}
	data, err := json.Marshal(j)
	if err != nil {
		return false, err
	}
	subject := s.Submit()
	if j.Parent != "" {
		subject = s.ShardSubject()
	}
	ack, err := js.Publish(ctx, subject, data, jetstream.WithMsgID(j.ID), jetstream.WithExpectStream(s.withDefaults().Stream))
	if err != nil {
		return false, fmt.Errorf("jobs: submit %s: %w", j.ID, err)
	}
	if ack.Duplicate {
		return true, nil
	}
	kv, err := js.KeyValue(ctx, s.Bucket())
	if err != nil {
		return false, fmt.Errorf("jobs: submit %s: %w", j.ID, err)
	}
	// Create, not Put: a worker may already have taken the job.
	st := Status{ID: j.ID, Parent: j.Parent, State: StateQueued, Updated: time.Now().UTC()}
	if _, err := kv.Create(ctx, j.ID, st.encode()); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return false, fmt.Errorf("jobs: status of %s: %w", j.ID, err)
	}
	return false, nil
}

// Claim records the sweep job of relay (discover.Normalize's form) as
// done by node, which archives it from its own configuration: a sweep job
// that other nodes submit for it later is dropped by the worker that
// takes it. A record that exists (the relay was swept, or claimed) is
// left alone: claimed is false.
func Claim(ctx context.Context, js jetstream.JetStream, s Subjects, relay, node string) (claimed bool, err error) {
	kv, err := js.KeyValue(ctx, s.Bucket())
	if err != nil {
		return false, fmt.Errorf("jobs: claim %s: %w", relay, err)
	}
	st := Status{ID: SweepID(relay), State: StateDone, Node: node, Finish: FinishConfigured,
		Relays: []RelayResult{{Relay: relay, Finish: FinishConfigured}}, Updated: time.Now().UTC()}
	switch _, err := kv.Create(ctx, st.ID, st.encode()); {
	case errors.Is(err, jetstream.ErrKeyExists):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("jobs: claim %s: %w", relay, err)
	}
	return true, nil
}
