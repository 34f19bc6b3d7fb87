package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nostr-archiver/archiver/config"
	"github.com/nostr-archiver/archiver/jobs"
)

// natsFlags are the connection flags of submit and jobs.
type natsFlags struct{ cfg config.NATS }

func (n *natsFlags) register(fs *flag.FlagSet) {
	d := config.DefaultNATS()
	fs.StringVar(&n.cfg.URL, "nats", "", "NATS server URL (required)")
	fs.StringVar(&n.cfg.Stream, "stream", d.Stream, "JetStream stream of crawl jobs")
	fs.StringVar(&n.cfg.SubjectPrefix, "subject-prefix", d.SubjectPrefix, "subject prefix")
	fs.StringVar(&n.cfg.User, "user", "", "NATS user")
	fs.StringVar(&n.cfg.Password, "password", "", "NATS password")
	fs.StringVar(&n.cfg.Token, "token", "", "NATS token")
	fs.StringVar(&n.cfg.CredsFile, "creds", "", "NATS credentials file")
	fs.StringVar(&n.cfg.NkeySeedFile, "nkey", "", "NATS nkey seed file")
	fs.StringVar(&n.cfg.TLSCA, "tls-ca", "", "CA bundle for the NATS server's certificate")
}

// errNoNATS is connect's error without --nats: a usage error.
var errNoNATS = errors.New("--nats is required")

// connectError reports a failed connect: exit 2 without --nats, else 1.
func (n *natsFlags) connectError(cmd string, err error) int {
	if errors.Is(err, errNoNATS) {
		return usageError(cmd, err)
	}
	return fail(cmd, fmt.Errorf("NATS %s: %w", n.cfg.URL, err))
}

func (n *natsFlags) connect() (jetstream.JetStream, func(), error) {
	if n.cfg.URL == "" {
		return nil, nil, errNoNATS
	}
	nc, err := jobs.Connect(n.cfg, "archiver cli")
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc.Close, nil
}

func runSubmit(args []string) int {
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	var (
		n        natsFlags
		id       = fs.String("id", "", "job id, chosen by the submitter: the same id submitted twice runs once (default: generated)")
		mode     = fs.String("mode", jobs.ModeBackfill, "backfill or live")
		priority = fs.Int("priority", jobs.DefaultPriority, "0 (lowest) to 9")
		kinds    = fs.String("kinds", "", "only these kinds, comma-separated")
		authors  = fs.String("authors", "", "only these authors: hex pubkeys, comma-separated")
		since    = fs.String("since", "", "oldest created_at (unix seconds, RFC 3339, YYYY-MM-DD, or a duration ago)")
		until    = fs.String("until", "", "newest created_at")
		wait     = fs.Bool("wait", false, "block until the job is done; exit 0 only if every part drained")
		timeout  = fs.Duration("timeout", 0, "with --wait: give up after this long (0: never)")
	)
	n.register(fs)
	relays, err := parseInterspersed(fs, args)
	if err != nil {
		return flagExit(err)
	}
	now := time.Now()
	j := &jobs.Job{ID: *id, Relays: relays, Mode: *mode, Priority: *priority}
	if j.ID == "" {
		j.ID = fmt.Sprintf("job-%d", now.UnixNano())
	}
	if j.Filter.Since, err = parseTime(*since, now); err != nil {
		return usageError("--since", err)
	}
	if j.Filter.Until, err = parseTime(*until, now); err != nil {
		return usageError("--until", err)
	}
	if j.Filter.Kinds, err = parseKinds(*kinds); err != nil {
		return usageError("--kinds", err)
	}
	if j.Filter.Authors, err = parseAuthors(*authors); err != nil {
		return usageError("--authors", err)
	}
	// The same checks a worker makes, but private targets are the
	// worker's call (its configuration may allow them).
	if err := j.Validate(true); err != nil {
		return usageError("submit", err)
	}
	js, closeNC, err := n.connect()
	if err != nil {
		return n.connectError("submit", err)
	}
	defer closeNC()
	ctx, stop := signalContext()
	defer stop()
	subjects := jobs.SubjectsFrom(n.cfg)
	if _, _, err := jobs.EnsureStream(ctx, js, subjects); err != nil {
		return fail("submit", err)
	}
	dup, err := jobs.Submit(ctx, js, subjects, j)
	if err != nil {
		return fail("submit", err)
	}
	if dup {
		fmt.Fprintf(stderr, "job %s was already submitted: not queued again\n", j.ID)
	} else {
		fmt.Fprintf(stderr, "job %s queued\n", j.ID)
	}
	fmt.Println(j.ID)
	if !*wait {
		return 0
	}
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	rep, err := jobs.Wait(ctx, js, subjects, j.ID, time.Second)
	if rep != nil {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	}
	if err != nil {
		return fail("submit", fmt.Errorf("job %s: %w", j.ID, err))
	}
	return 0
}

func runJobs(args []string) int {
	fs := flag.NewFlagSet("jobs", flag.ContinueOnError)
	var n natsFlags
	n.register(fs)
	ids, err := parseInterspersed(fs, args)
	if err != nil {
		return flagExit(err)
	}
	js, closeNC, err := n.connect()
	if err != nil {
		return n.connectError("jobs", err)
	}
	defer closeNC()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subjects := jobs.SubjectsFrom(n.cfg)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if len(ids) == 0 {
		list, err := jobs.ListJobs(ctx, js, subjects)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			err = nil // no job was ever submitted to this stream
		}
		if err != nil {
			return fail("jobs", err)
		}
		if len(list) == 0 {
			fmt.Fprintln(stderr, "no jobs")
			list = []jobs.Status{} // [], not null
		}
		_ = enc.Encode(list)
		return 0
	}
	code := 0
	for _, id := range ids {
		rep, err := jobs.JobStatus(ctx, js.Conn(), subjects, id)
		if err != nil {
			fail("jobs", fmt.Errorf("%s: %w", id, err))
			code = 1
			continue
		}
		_ = enc.Encode(rep)
	}
	return code
}
