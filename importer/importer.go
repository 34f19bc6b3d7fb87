// Package importer reads events from JSON Lines (strfry export, nak
// output, archiver export) into the raw store, the way the crawl stores
// what relays send: each line's id is byte-scanned, the line's bytes are
// kept exactly, and verification is left to the lazy pool. A line that is
// not an event is quarantined with its line number and the import goes
// on. The position in the file is committed with each batch, so a killed
// import resumes where it stopped.
package importer

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"

	"github.com/nostr-archiver/archiver/frame"
	"github.com/nostr-archiver/archiver/rawstore"
)

// SourcePrefix starts the provenance name of imported events: a file
// imported as NAME is recorded as the source "import:NAME", where crawled
// events name their relay's URL.
const SourcePrefix = "import:"

// cursorJob is the key of an import's position under its source.
const cursorJob = "import"

// headLen is how much of the file's start the cursor fingerprints, so that
// another file imported under the same name starts from its beginning.
const headLen = 64 << 10

// Reasons under which bad lines are quarantined (and counted in stats).
const (
	ReasonTooLong  = "import: line too long"
	ReasonNotJSON  = "import: not JSON"
	ReasonNotEvent = "import: not an event (no valid id or created_at)"
)

// Options configures an import. Store and Name are required.
type Options struct {
	Store *rawstore.Store
	// Name identifies the source: the provenance "import:Name" and the
	// resumable cursor. Importing the same file under the same name again
	// resumes (or, once finished, reads only what was appended).
	Name string
	// MaxLine is the longest line taken as an event; longer lines are
	// quarantined truncated to this length. Default 8 MiB, the crawl's
	// largest frame.
	MaxLine int
	// BatchEvents and BatchBytes bound one commit. Defaults 2000, 4 MiB.
	BatchEvents int
	BatchBytes  int
	// OnCommit, if set, is called after each committed batch (the verify
	// pool's Notify).
	OnCommit func()
	// OnMalformed, if set, is called for each quarantined line.
	OnMalformed func(line int64, reason string)
}

func (o *Options) validate() error {
	if o.Store == nil {
		return errors.New("importer: no store")
	}
	if o.Name == "" {
		return errors.New("importer: no source name")
	}
	if o.MaxLine == 0 {
		o.MaxLine = 8 << 20
	}
	if o.BatchEvents == 0 {
		o.BatchEvents = 2000
	}
	if o.BatchBytes == 0 {
		o.BatchBytes = 4 << 20
	}
	if o.MaxLine < 1 || o.BatchEvents < 1 || o.BatchBytes < 1 {
		return errors.New("importer: MaxLine, BatchEvents and BatchBytes must be positive")
	}
	return nil
}

// Result says what an import did.
type Result struct {
	ResumedAt  int64 // the line the import resumed after (0: from the start)
	Restarted  bool  // a cursor existed but the file's start differs: read from the start
	Lines      int64 // lines read by this run (blank ones included)
	Events     int64 // lines that were events
	New        int64 // ids the archive did not hold
	Duplicates int64 // byte-identical copies of held ids
	Variants   int64 // copies whose bytes differ from the held one
	Malformed  int64 // lines quarantined by this run (a line quarantined before is not counted again)
	Offset     int64 // bytes of the input consumed, in all
}

// Importer is one import. Progress may be read while Run works.
type Importer struct {
	o      Options
	relay  uint32
	offset atomic.Int64 // bytes consumed (committed or not)
	lines  atomic.Int64 // line number of the last line read
	events atomic.Int64 // events read by this run
}

// New checks o and registers the source.
func New(o Options) (*Importer, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	relay, err := o.Store.RelayIndex(SourcePrefix + o.Name)
	if err != nil {
		return nil, err
	}
	return &Importer{o: o, relay: relay}, nil
}

// Progress returns the bytes consumed, the current line number and the
// events read so far.
func (im *Importer) Progress() (offset, line, events int64) {
	return im.offset.Load(), im.lines.Load(), im.events.Load()
}

// cursor is the committed position of an import.
type cursor struct {
	Offset int64  `json:"offset"`
	Line   int64  `json:"line"`
	Head   string `json:"head"` // sha256 of the first min(Offset, headLen) bytes
}

// Run imports r from where the last import under the same name stopped.
// If r is an io.Seeker (a file) it seeks there; otherwise it reads and
// discards up to there. It returns at EOF, on ctx's cancellation (with
// what was committed so far, and ctx's error) or on a store error.
func (im *Importer) Run(ctx context.Context, r io.Reader) (Result, error) {
	var res Result
	cur, err := im.loadCursor()
	if err != nil {
		return res, err
	}
	in, head, err := im.resume(r, &cur, &res)
	if err != nil {
		return res, err
	}
	br := bufio.NewReaderSize(in, 256<<10)
	b := newBatch(im)
	var line []byte
	// pos is the input's position; cur moves to the end of each whole
	// line. A last line without its newline is imported but not passed:
	// the file may still be growing (or was cut), so the next run reads
	// that line again, whole.
	pos := cur.Offset
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) <= im.o.MaxLine+1 {
			line = append(line, chunk...)
		} else if len(line) <= im.o.MaxLine {
			line = append(line, chunk[:im.o.MaxLine+1-len(line)]...)
		}
		head.write(chunk)
		pos += int64(len(chunk))
		im.offset.Store(pos)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return res, fmt.Errorf("import %s: read line %d: %w", im.o.Name, cur.Line+1, err)
		}
		if len(line) > 0 {
			res.Lines++
			im.lines.Store(cur.Line + 1)
			b.add(cur.Line+1, line, &res)
			if err == nil { // a whole line
				cur.Line++
				cur.Offset = pos
			}
			line = line[:0]
		}
		eof := err != nil
		if eof || b.full() {
			cur.Head = head.sum(cur.Offset)
			if err := b.commit(cur, &res); err != nil {
				return res, err
			}
		}
		if eof {
			res.Offset = pos
			return res, nil
		}
	}
}

func (im *Importer) loadCursor() (cursor, error) {
	var cur cursor
	v, err := im.o.Store.Shard(im.relay, cursorJob)
	if err != nil || v == nil {
		return cur, err
	}
	if err := json.Unmarshal(v, &cur); err != nil || cur.Offset < 0 || cur.Line < 0 {
		return cursor{}, fmt.Errorf("import %s: unreadable cursor %q", im.o.Name, v)
	}
	return cur, nil
}

// resume positions r at cur if the input starts as the one the cursor was
// written for; otherwise it resets cur. It returns the reader to go on
// with and the fingerprint of the input's start read so far.
func (im *Importer) resume(r io.Reader, cur *cursor, res *Result) (io.Reader, *headHash, error) {
	head := &headHash{}
	if cur.Offset == 0 {
		*cur = cursor{}
		return r, head, nil
	}
	start := make([]byte, min(cur.Offset, headLen))
	n, err := io.ReadFull(r, start)
	start = start[:n]
	head.write(start)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("import %s: read: %w", im.o.Name, err)
	}
	if int64(n) < int64(len(start)) || head.sum(cur.Offset) != cur.Head {
		// Another file (or a shorter one) under the same name.
		*cur = cursor{}
		res.Restarted = true
		return io.MultiReader(bytes.NewReader(start), r), &headHash{}, nil
	}
	rest := cur.Offset - int64(n)
	if s, ok := r.(io.Seeker); ok && rest > 0 {
		if _, err := s.Seek(cur.Offset, io.SeekStart); err == nil {
			rest = 0
		} // else a pipe: read up to there
	}
	if m, err := io.CopyN(io.Discard, r, rest); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, fmt.Errorf("import %s: the input is shorter (%d bytes) than what was imported under this name (%d bytes); import it under another --name", im.o.Name, int64(n)+m, cur.Offset)
		}
		return nil, nil, fmt.Errorf("import %s: skip to byte %d: %w", im.o.Name, cur.Offset, err)
	}
	res.ResumedAt = cur.Line
	im.lines.Store(cur.Line)
	im.offset.Store(cur.Offset)
	return r, head, nil
}

// headHash keeps the first headLen bytes of the input, to fingerprint the
// start of what the cursor has passed.
type headHash struct{ b []byte }

func (h *headHash) write(p []byte) {
	if len(h.b) < headLen {
		h.b = append(h.b, p[:min(len(p), headLen-len(h.b))]...)
	}
}

// sum is the fingerprint of the input's first min(offset, headLen) bytes.
func (h *headHash) sum(offset int64) string {
	s := sha256.Sum256(h.b[:min(int64(len(h.b)), offset)])
	return hex.EncodeToString(s[:])
}

// batch collects one commit's events and quarantined lines.
type batch struct {
	im    *Importer
	in    rawstore.Batch
	bytes int
	wrap  []byte // the line wrapped as a relay frame, for frame.Parse
}

func newBatch(im *Importer) *batch {
	return &batch{im: im, in: rawstore.Batch{Relay: im.relay}}
}

// add takes one line (its bytes are copied).
func (b *batch) add(n int64, line []byte, res *Result) {
	raw := bytes.TrimSpace(line)
	if len(raw) == 0 {
		return
	}
	reason := ""
	var id [32]byte
	var createdAt int64
	switch {
	case len(bytes.TrimRight(line, "\r\n")) > b.im.o.MaxLine:
		reason = ReasonTooLong
		raw = raw[:min(len(raw), b.im.o.MaxLine)]
	default:
		// The crawl's scanner reads events inside relay frames: wrap the
		// line as one so that both take exactly the same events.
		b.wrap = append(append(append(b.wrap[:0], `["EVENT","i",`...), raw...), ']')
		m, err := frame.Parse(b.wrap)
		switch {
		case err == nil && m.Label == frame.Event:
			id, createdAt = m.ID, m.CreatedAt
		case json.Valid(raw):
			reason = ReasonNotEvent
		default:
			reason = ReasonNotJSON
		}
	}
	cp := bytes.Clone(raw)
	b.bytes += len(cp)
	if reason != "" {
		b.in.Malformed = append(b.in.Malformed, rawstore.Malformed{
			Raw: cp, Reason: reason, Where: "line " + strconv.FormatInt(n, 10),
			// The same bad line at another place is another finding; the
			// same place read again (a re-import) is not.
			Key: append([]byte(SourcePrefix+b.im.o.Name+"\x00"+strconv.FormatInt(n, 10)+"\x00"), cp...),
		})
		if b.im.o.OnMalformed != nil {
			b.im.o.OnMalformed(n, reason)
		}
		return
	}
	b.in.Events = append(b.in.Events, rawstore.Copy{ID: id, Raw: cp, CreatedAt: createdAt, Timed: true})
	b.im.events.Add(1)
	res.Events++
}

func (b *batch) full() bool {
	return len(b.in.Events)+len(b.in.Malformed) >= b.im.o.BatchEvents || b.bytes >= b.im.o.BatchBytes
}

// commit stores the batch with the cursor after its last line.
func (b *batch) commit(cur cursor, res *Result) error {
	state, err := json.Marshal(cur)
	if err != nil {
		return err
	}
	b.in.Shards = map[string][]byte{cursorJob: state}
	ir, err := b.im.o.Store.Ingest(&b.in)
	if err != nil {
		return fmt.Errorf("import %s: store lines up to %d: %w", b.im.o.Name, cur.Line, err)
	}
	res.New += int64(ir.New)
	res.Duplicates += int64(ir.Duplicates)
	res.Variants += int64(ir.Variants)
	res.Malformed += int64(ir.Malformed)
	b.in.Events, b.in.Malformed, b.bytes = b.in.Events[:0], b.in.Malformed[:0], 0
	if b.im.o.OnCommit != nil {
		b.im.o.OnCommit()
	}
	return nil
}
