package crawl

import (
	"encoding/json"
	"fmt"
	"github.com/nostr-archiver/archiver/rawstore"
	"strconv"
)

// A job is one created_at range of one relay, split into shards. Its
// state lives in the raw store under keys derived from the range as the
// user gave it, so running the same command again resumes it.
type jobState struct {
	key    string
	meta   jobMeta
	shards []*shardState
}

type jobMeta struct {
	Since  int64    `json:"since"`
	Until  int64    `json:"until"` // resolved: "now" at the first run of an open job
	Open   bool     `json:"open"`  // until was "now": a finished job extends on the next run
	Gen    int      `json:"gen"`
	Shards []string `json:"shards"`
	Done   bool     `json:"done"`
}

// shardState is one shard's cursor: the next page asks for
// [Since, Cursor]; the shard is done when nothing remains.
type shardState struct {
	key    string
	ID     string `json:"id"`
	Since  int64  `json:"since"`
	Until  int64  `json:"until"`
	Cursor int64  `json:"cursor"`
	Done   bool   `json:"done"`
}

func (s *shardState) encode() []byte {
	b, _ := json.Marshal(s)
	return b
}

// openOverlap is how far back an extension of an open job starts before
// the previous run's end, for events that arrived late with an older
// created_at.
const openOverlap = 600

func (r *relayCrawl) loadJob() (*jobState, error) {
	o := r.c.opts
	spec := "now"
	if o.Until != 0 {
		spec = strconv.FormatInt(o.Until, 10)
	}
	j := &jobState{key: fmt.Sprintf("job/%d/%s", o.Since, spec)}
	raw, err := o.Store.Shard(r.idx, j.key)
	if err != nil {
		return nil, err
	}
	now := o.Now().Unix()
	if raw == nil {
		j.meta = jobMeta{Since: o.Since, Until: o.Until, Open: o.Until == 0}
		if j.meta.Open {
			j.meta.Until = max(now, o.Since)
		}
		return j, r.plan(j, j.meta.Since, j.meta.Until)
	}
	if err := json.Unmarshal(raw, &j.meta); err != nil {
		return nil, fmt.Errorf("job state %s of %s: %w", j.key, r.url, err)
	}
	if j.meta.Done && j.meta.Open && now > j.meta.Until {
		// Extend a finished open job to the new "now".
		from := max(j.meta.Since, j.meta.Until-openOverlap)
		j.meta.Until, j.meta.Done, j.meta.Shards = now, false, nil
		j.meta.Gen++
		return j, r.plan(j, from, now)
	}
	for _, id := range j.meta.Shards {
		raw, err := o.Store.Shard(r.idx, j.key+"/"+id)
		if err != nil {
			return nil, err
		}
		s := &shardState{key: j.key + "/" + id}
		if raw == nil {
			return nil, fmt.Errorf("job %s of %s: shard %s missing", j.key, r.url, id)
		}
		if err := json.Unmarshal(raw, s); err != nil {
			return nil, fmt.Errorf("shard %s of %s: %w", s.key, r.url, err)
		}
		j.shards = append(j.shards, s)
	}
	return j, nil
}

// plan creates the shards of [since, until] and persists them with the
// job meta in one batch.
func (r *relayCrawl) plan(j *jobState, since, until int64) error {
	s := &shardState{ID: fmt.Sprintf("g%d.0", j.meta.Gen), Since: since, Until: until, Cursor: until}
	s.key = j.key + "/" + s.ID
	j.shards = append(j.shards, s)
	j.meta.Shards = append(j.meta.Shards, s.ID)
	return r.saveJob(j)
}

func (r *relayCrawl) saveJob(j *jobState) error {
	shards := map[string][]byte{}
	meta, _ := json.Marshal(&j.meta)
	shards[j.key] = meta
	for _, s := range j.shards {
		shards[s.key] = s.encode()
	}
	_, err := r.c.opts.Store.Ingest(&rawstore.Batch{Relay: r.idx, Shards: shards})
	return err
}

func (r *relayCrawl) finishJob(j *jobState) error {
	j.meta.Done = true
	return r.saveJob(j)
}
