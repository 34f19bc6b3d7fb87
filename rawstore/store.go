// Package rawstore is the archive on disk: each event's bytes exactly as
// a relay sent them, in an append-only segment log (segment.go), indexed
// by the 32-byte id the receive path scanned from them in a Pebble
// database that also holds the verify queue, verdicts, provenance, crawl
// cursors and counters.
//
// Two rules shape it (docs/ARCHITECTURE.md has the key space):
//   - a new event costs two keys (E and P); a duplicate costs a lookup;
//   - crawl state (cursors) is written in the same batch as the events it
//     has passed, after their bodies are synced to the log, so a crash
//     can lose both or neither.
package rawstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
)

// VerifyHotBytes is the HotBytes of a command that verifies while it
// ingests (crawl, the daemon). The verify pool is several times slower
// than the ingest, so it only ever takes the newest copies, a batch of
// 1,024 (~1.2 MB) at a time, and a few batches in memory keep it busy:
// twice this (16 MB) verified a 1M-event crawl no faster and raised its
// peak RSS by ~15 MB, to 252-265 MB.
const VerifyHotBytes = 8 << 20

// Options configure a Store. The zero value of every field but Dir means
// its default (see setDefaults).
type Options struct {
	Dir    string
	FS     vfs.FS // default vfs.Default; tests pass vfs.NewCrashableMem()
	Logger *zap.Logger
	// NoSync commits ingest batches without fsync. The default (false)
	// syncs every ingest commit, so a crash re-fetches at most the pages
	// in flight; NoSync trades that for throughput on slow disks.
	NoSync bool
	// CacheSize is the block cache (default 32 MiB), on top of what the
	// memtables take from it; MemTableSize is one memtable (default 32
	// MiB; up to two are in memory while one flushes).
	CacheSize    int64
	MemTableSize uint64
	// HotBytes bounds the recently ingested event bytes kept in memory for
	// a verify pool running alongside the ingest (see hotCopies); 0 keeps
	// none (nothing would take them: a crawl with --no-verify, a
	// reprocess). Resident memory grows by about twice this; see
	// VerifyHotBytes.
	HotBytes int
	// EventListener receives Pebble's health events (write stalls, slow
	// disk, low disk space) in addition to the store's own logging.
	EventListener *pebble.EventListener
	// ReadOnly opens the archive without writing anything: no lock file
	// created, no WAL, no compaction; it works on a read-only directory
	// and coexists with other readers, not with a writer (ErrInUse). Any
	// write through the store fails. It implies NoCreate.
	ReadOnly bool
	// NoCreate refuses (ErrNotArchive) a Dir that does not already hold
	// an archive, instead of creating one in it.
	NoCreate bool
	// ReserveBytes is the space reserve of a writable store (see
	// DefaultReserveBytes; 0 means that or an eighth of the free space,
	// whichever is less; negative for none). MemTableSize 0 is likewise
	// sized to the free space (see memTableFor).
	ReserveBytes int64
	// BlockSize is the size at which tables and blob files cut their
	// blocks (default 16 KiB, see Open). Tests of damaged tables use small
	// blocks: on a checksum mismatch Pebble searches the block for one
	// flipped bit, which costs its size squared per read.
	BlockSize int
	// Now is the clock of first-seen times (default time.Now; tests
	// inject one).
	Now func() time.Time
}

func (o *Options) setDefaults() {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.CacheSize == 0 {
		o.CacheSize = 32 << 20
	}
	if o.MemTableSize == 0 {
		o.MemTableSize = 32 << 20
	}
	if o.BlockSize == 0 {
		o.BlockSize = 16 << 10
	}
}

// Validate reports the first bad option.
func (o *Options) Validate() error {
	if o.Dir == "" {
		return errors.New("rawstore: Dir is required")
	}
	if o.CacheSize < 0 {
		return fmt.Errorf("rawstore: CacheSize %d < 0", o.CacheSize)
	}
	return nil
}

// Store is the archive. It is safe for concurrent use.
type Store struct {
	db *pebble.DB
	// r reads: db, or in a read-only store that a crash left with a
	// journal, an overlay holding the journal's E keys (journal.go).
	r       pebble.Reader
	overlay *pebble.Batch
	pend    pendingE // E keys waiting for a fold (journal.go)
	opts    Options
	sync    *pebble.WriteOptions

	ingestMu sync.Mutex // serializes dedup lookups with the writes they decide
	applyMu  sync.Mutex // serializes verdict application
	isort    *indexSort // index keys deferred to a sorted build (DeferIndexes), under applyMu
	// readBack admits one ReadBack at a time: each holds a batch of ids
	// and bodies, and the daemon may read back many relays at once.
	readBack chan struct{}

	pendingSeq atomic.Uint64
	quarSeq    atomic.Uint64
	staleUpTo  atomic.Uint64 // queue entries up to this seq may be judged already (see scanKey)
	unqueued   atomic.Bool   // see unqueuedKey
	noQueue    atomic.Bool   // see LeaveUnqueued
	hot        *hotCopies
	damage     damageLog // damaged records met since Open (see Damage)
	faults     *faults
	recent     recentCommits      // lets Ingest look ids up outside ingestMu
	added      map[[32]byte]*Copy // a batch's new copies, under ingestMu (see ingestLocked)
	ids        *idFilter          // proves ids new without a lookup; nil read-only
	segs       *segments          // the event bodies (see segment.go)

	idsStop, idsDone chan struct{} // the id filter's build; nil read-only

	trimStop, trimDone chan struct{} // trimLoop's; nil without a C allocator to trim

	idIndexMu    sync.Mutex  // one id index build at a time (see EnsureIDIndex)
	idIndexed    atomic.Bool // the id index is known complete
	sightIndexed atomic.Bool // the sighting index is complete (see sightingMarkKey)

	relayMu  sync.Mutex
	relayIdx map[string]uint32
	relayURL []string
}

// Open opens (creating if needed) the archive in opts.Dir.
func Open(opts Options) (_ *Store, err error) {
	autoMem := opts.MemTableSize == 0
	opts.setDefaults()
	if avail, ok := availBytes(opts.FS, opts.Dir); ok && !opts.ReadOnly {
		if autoMem {
			opts.MemTableSize = memTableFor(avail)
		}
		if opts.ReserveBytes == 0 {
			opts.ReserveBytes = int64(min(DefaultReserveBytes, avail/8))
		}
	}
	defer func() {
		if r := recover(); r != nil {
			fp, ok := r.(fatalPanic)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("rawstore: open %s: %s", opts.Dir, fp.msg)
			if isNoSpace(err) {
				err = fmt.Errorf("%w: %v", ErrNoSpace, err)
			}
		}
	}()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.NoCreate || opts.ReadOnly {
		if err := isArchive(opts.FS, opts.Dir); err != nil {
			return nil, err
		}
	}
	fs := opts.FS
	if opts.ReadOnly {
		fs = readOnlyFS{FS: fs, real: fs == vfs.Default}
	}
	po := &pebble.Options{
		FS:                          fs,
		ReadOnly:                    opts.ReadOnly,
		ErrorIfNotExists:            opts.NoCreate,
		FormatMajorVersion:          pebble.FormatNewest,
		MemTableSize:                opts.MemTableSize,
		MemTableStopWritesThreshold: 4,
		// Every flush of random ids spans the whole E range, so each
		// compaction out of L0 rewrites all of Lbase: taking 8 flushes at
		// a time instead of 2 cut the bytes written per byte received
		// from 1.73 to 1.46 and the store's CPU by a quarter in a 1M crawl
		// (crawlbench -quick, alternated). The cost is up to 8 more L0
		// tables per lookup, which the bloom filters answer.
		L0CompactionThreshold:      8,
		L0StopWritesThreshold:      1000,
		LBaseMaxBytes:              64 << 20,
		Merger:                     counterMerger,
		CompactionConcurrencyRange: func() (int, int) { return 1, 3 },
		Logger:                     zapPebbleLogger{opts.Logger.Sugar(), opts.Logger, opts.Dir},
	}
	// Pebble charges memtables to the block cache: a cache no bigger than
	// the memtables caches nothing, and every lookup then reads its filter
	// blocks from disk (the 1M-event crawl: 0 cached blocks, 57 CPU-s;
	// with room for two memtables on top: 82% hits, 43 CPU-s).
	cache := pebble.NewCache(opts.CacheSize + 2*int64(opts.MemTableSize))
	defer cache.Unref()
	po.Cache = cache
	// Bloom filters on every level, the last included: most ingest
	// lookups are for new ids, which must miss without reading a block
	// (the random ids end up in the last level, where Pebble's usual
	// setup saves the filter's space). The index keys are left out of
	// them (keyFilter).
	filter := newKeyFilter()
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = filter
		po.Levels[i].FilterType = pebble.TableFilter
		// Blob files cut their value blocks at BlockSize too. Pebble's 4
		// KiB holds three event bodies: every block read, cached, checksummed
		// and (de)compressed on its own. At 16 KiB a 1M crawl took 33-35
		// CPU-s instead of 42-43 and verifying it in key order 37 instead
		// of 47-53; a random Get reads 16 KiB, still one block.
		po.Levels[i].BlockSize = opts.BlockSize
	}
	// Bodies still held in Pebble (archives from before the segment log,
	// alternates, quarantined copies) go to blob files: compactions then move small keys,
	// not the bodies, which is most of the write amplification of random
	// ids (measured in BenchmarkIngest). Every flush of random ids spans
	// the whole key space, so each adds one to the blob reference depth of
	// what it is compacted into; past MaxBlobReferenceDepth a compaction
	// rewrites the bodies for key-order locality. At Pebble's 10, a 1M
	// crawl rewrote them about three times (a quarter of its CPU); at 64
	// it rewrites none, and verifying the archive in key order took as
	// long (crawlbench (c) and (d)).
	po.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
		return pebble.ValueSeparationPolicy{
			Enabled: true, MinimumSize: 256, MaxBlobReferenceDepth: 64,
			RewriteMinimumAge: 5 * time.Minute, TargetGarbageRatio: 1.0,
		}
	}
	f := &faults{dir: opts.Dir, fs: opts.FS, log: opts.Logger}
	el := f.listener()
	if opts.EventListener != nil {
		el = pebble.TeeEventListener(el, *opts.EventListener)
	}
	po.EventListener = &el
	db, err := pebble.Open(opts.Dir, po)
	if err != nil {
		if err := inUse(opts.Dir, err); errors.Is(err, ErrInUse) {
			return nil, err
		}
		return nil, fmt.Errorf("rawstore: open %s: %w", opts.Dir, err)
	}
	s := &Store{db: db, r: db, pend: pendingE{foldAt: foldEvery}, opts: opts, sync: pebble.Sync, relayIdx: map[string]uint32{}, added: map[[32]byte]*Copy{}, hot: newHotCopies(opts.HotBytes), faults: f,
		readBack: make(chan struct{}, 1)}
	if !opts.ReadOnly {
		f.makeReserve(opts.ReserveBytes)
	}
	if opts.NoSync {
		s.sync = pebble.NoSync
	}
	if err := s.load(); err != nil {
		_ = db.Close()
		return nil, err
	}
	if s.segs, err = s.openSegments(fs); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("rawstore: open %s: %w", opts.Dir, err)
	}
	if err := s.openJournal(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("rawstore: open %s: %w", opts.Dir, err)
	}
	if !opts.ReadOnly {
		if err := s.markIDIndexIfEmpty(); err != nil {
			_ = db.Close()
			return nil, err
		}
		if err := s.markIndexesIfEmpty(); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("rawstore: open %s: %w", opts.Dir, err)
		}
		// The runs of an index sort cut off: its marks are down.
		if err := s.removeIndexRuns(); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("rawstore: open %s: %w", opts.Dir, err)
		}
	}
	if err := s.loadSightingMark(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("rawstore: open %s: %w", opts.Dir, err)
	}
	if !opts.ReadOnly {
		stored, err := s.storedEvents()
		if err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("rawstore: open %s: count events: %w", opts.Dir, err)
		}
		s.ids = newIDFilter(stored)
		s.idsStop, s.idsDone = make(chan struct{}), make(chan struct{})
		go func() {
			defer close(s.idsDone)
			if err := s.buildIDFilter(s.ids, s.idsStop); err != nil {
				opts.Logger.Warn("ingest looks every id up: the id filter could not be built", zap.String("dir", opts.Dir), zap.Error(err))
			}
		}()
	}
	if cMallocFree() >= 0 {
		s.trimStop, s.trimDone = make(chan struct{}), make(chan struct{})
		go trimLoop(s.trimStop, s.trimDone)
	}
	return s, nil
}

// load restores the sequence counters, the scan marks and the relay
// registry.
func (s *Store) load() error {
	// A read-only store opens over damage here (check and export must
	// run on a damaged archive), noting it; a writer must not guess its
	// sequence counters, so it refuses with a CorruptError.
	damaged := func(key []byte, err error) error {
		if err == nil || !pebble.IsCorruptionError(err) {
			return err
		}
		var ce *CorruptError
		if !errors.As(err, &ce) {
			ce = corrupt(key, err)
		}
		if s.opts.ReadOnly {
			s.noteDamage(ce)
			return nil
		}
		return fmt.Errorf("rawstore: open %s: %w; `archiver check --data %s` lists the damage", s.opts.Dir, ce, s.opts.Dir)
	}
	for _, p := range []struct {
		prefix byte
		seq    *atomic.Uint64
	}{{prefixPending, &s.pendingSeq}, {prefixQuarant, &s.quarSeq}} {
		last, err := s.lastKey([]byte{p.prefix})
		if err != nil {
			if err := damaged([]byte{p.prefix}, err); err != nil {
				return err
			}
		}
		if len(last) == 9 {
			p.seq.Store(binary.BigEndian.Uint64(last[1:]))
		}
	}
	if v, err := s.get(scanKey); err != nil {
		if err := damaged(scanKey, err); err != nil {
			return err
		}
	} else if len(v) == 8 {
		s.staleUpTo.Store(binary.BigEndian.Uint64(v))
	}
	if _, closer, err := s.r.Get(unqueuedKey); err == nil {
		closer.Close()
		s.unqueued.Store(true)
	} else if !errors.Is(err, pebble.ErrNotFound) {
		if err := damaged(unqueuedKey, err); err != nil {
			return err
		}
	}
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixRelay}, UpperBound: []byte{prefixRelay + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		idx := binary.BigEndian.Uint32(it.Key()[1:])
		url, _ := splitRelayRecord(it.Value())
		for uint32(len(s.relayURL)) <= idx {
			s.relayURL = append(s.relayURL, "")
		}
		s.relayURL[idx] = url
		s.relayIdx[url] = idx
	}
	return damaged([]byte{prefixRelay}, it.Error())
}

func (s *Store) lastKey(prefix []byte) ([]byte, error) {
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	if it.Last() {
		return append([]byte(nil), it.Key()...), nil
	}
	return nil, it.Error()
}

// Close flushes and closes the database. Every iterator and batch must be
// finished first.
func (s *Store) Close() error {
	if s.idsStop != nil {
		close(s.idsStop)
		<-s.idsDone
	}
	if s.trimStop != nil {
		close(s.trimStop)
		<-s.trimDone
	}
	// The deferred index keys go in before the store closes; a build
	// that fails leaves the marks down for BuildIndexes (see indexsort.go).
	ierr := s.FinishIndexes()
	if ierr != nil {
		s.opts.Logger.Warn("closing with the indexes unbuilt: `archiver reprocess --index` builds them",
			zap.String("dir", s.opts.Dir), zap.Error(ierr))
	}
	// Folded at close, so that a clean shutdown leaves no journal. A fold
	// refused for want of space wrote nothing: the journal stays in the
	// WAL for the next writable open to fold, and the writer that met the
	// full disk has said so already.
	ferr := s.fold()
	if errors.Is(ferr, ErrNoSpace) {
		s.opts.Logger.Warn("closing with the event key journal unfolded: no space to fold it; the next open folds it",
			zap.String("dir", s.opts.Dir), zap.Int("entries", s.pendingCount()), zap.Error(ferr))
		ferr = nil
	}
	if s.overlay != nil {
		_ = s.overlay.Close()
	}
	serr := s.segs.close()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("rawstore: close: %w", err)
	}
	if ferr != nil {
		return fmt.Errorf("rawstore: close: %w", ferr)
	}
	if ierr != nil {
		return fmt.Errorf("rawstore: close: %w", ierr)
	}
	if serr != nil {
		return fmt.Errorf("rawstore: close segments: %w", serr)
	}
	return nil
}

// DB exposes the Pebble handle for metrics (db.Metrics()).
func (s *Store) DB() *pebble.DB { return s.db }

// RelayIndex returns the small integer that names url in keys, assigning
// (and durably recording) a new one the first time a URL is seen.
func (s *Store) RelayIndex(url string) (uint32, error) {
	s.relayMu.Lock()
	defer s.relayMu.Unlock()
	if idx, ok := s.relayIdx[url]; ok {
		return idx, nil
	}
	idx := uint32(len(s.relayURL))
	if err := s.gate("register relay "+url, 0, func() error { return s.db.Set(relayKey(idx), relayRecord(url, nil), pebble.Sync) }); err != nil {
		return 0, err
	}
	s.relayURL = append(s.relayURL, url)
	s.relayIdx[url] = idx
	return idx, nil
}

// RelayURL returns the URL registered under idx ("" if none).
func (s *Store) RelayURL(idx uint32) string {
	s.relayMu.Lock()
	defer s.relayMu.Unlock()
	if int(idx) < len(s.relayURL) {
		return s.relayURL[idx]
	}
	return ""
}

// relay records are url, NUL, crawl-owned payload.
func relayRecord(url string, payload []byte) []byte {
	v := make([]byte, 0, len(url)+1+len(payload))
	v = append(v, url...)
	v = append(v, 0)
	return append(v, payload...)
}

func splitRelayRecord(v []byte) (string, []byte) {
	for i, c := range v {
		if c == 0 {
			return string(v[:i]), v[i+1:]
		}
	}
	return string(v), nil
}

// Relay is one registered relay and its crawl-owned record.
type Relay struct {
	Index  uint32
	URL    string
	Record []byte
}

// Relays lists every registered relay with its latest record.
func (s *Store) Relays() ([]Relay, error) {
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixRelay}, UpperBound: []byte{prefixRelay + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []Relay
	for it.First(); it.Valid(); it.Next() {
		url, rec := splitRelayRecord(it.Value())
		out = append(out, Relay{Index: binary.BigEndian.Uint32(it.Key()[1:]), URL: url, Record: append([]byte(nil), rec...)})
	}
	return out, it.Error()
}

// ShardsWithPrefix returns every crawl-owned state of relay whose job key
// starts with prefix, keyed by the rest of the key.
func (s *Store) ShardsWithPrefix(relay uint32, prefix string) (map[string][]byte, error) {
	return s.collect(shardKey(relay, prefix))
}

// collect returns every value whose key starts with p, keyed by the rest
// of the key.
func (s *Store) collect(p []byte) (map[string][]byte, error) {
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	out := map[string][]byte{}
	for it.First(); it.Valid(); it.Next() {
		out[string(it.Key()[len(p):])] = append([]byte(nil), it.Value()...)
	}
	return out, it.Error()
}

// Shard returns the crawl-owned state stored for (relay, job), or nil.
func (s *Store) Shard(relay uint32, job string) ([]byte, error) {
	return s.get(shardKey(relay, job))
}

func (s *Store) get(key []byte) ([]byte, error) {
	if len(key) == 1+idLen && key[0] == prefixEvent {
		if v, ok := s.pendingValue((*[32]byte)(key[1:])); ok {
			return v, nil
		}
	}
	v, closer, err := s.r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if pebble.IsCorruptionError(err) {
		return nil, corrupt(key, err)
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// getOK reports whether key is present.
func (s *Store) getOK(key []byte) (bool, error) {
	_, closer, err := s.r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	closer.Close()
	return true, nil
}

// Sources returns the relays that served id: the first one, then the
// others in index order.
func (s *Store) Sources(id [32]byte) ([]uint32, error) {
	out, _, err := s.sightings(id)
	return out, err
}

// sightings is Sources with when each source first served the id.
func (s *Store) sightings(id [32]byte) ([]uint32, []int64, error) {
	v, err := s.get(eventKey(&id))
	if err != nil || eventHeaderSize(v) == 0 {
		return nil, nil, err
	}
	out, seen := []uint32{binary.BigEndian.Uint32(v[1:5])}, []int64{eventSeen(v)}
	p := append([]byte{prefixProven}, id[:]...)
	it, err := s.r.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, nil, err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		out = append(out, binary.BigEndian.Uint32(it.Key()[1+idLen:]))
		seen = append(seen, provSeen(it.Value()))
	}
	return out, seen, it.Error()
}

type zapPebbleLogger struct {
	s   *zap.SugaredLogger
	log *zap.Logger
	dir string
}

func (l zapPebbleLogger) Infof(format string, args ...any)  { l.s.Debugf(format, args...) }
func (l zapPebbleLogger) Errorf(format string, args ...any) { l.s.Errorf(format, args...) }
func (l zapPebbleLogger) Fatalf(format string, args ...any) {
	fatal(l.log, l.dir, fmt.Sprintf(format, args...))
}
