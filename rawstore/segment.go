package rawstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The segment log holds the bodies of the primary copies Ingest stores:
// append-only files DIR/segments/NNNNNN.seg of records
//
//	len (uint32 BE) | crc32c(raw) (uint32 BE) | raw
//
// each named by an E value of version 3 (see seen.go) that says where it
// is. A body is written once, sequentially, and never again: it stays out
// of Pebble's WAL, memtable, flushes and compactions, which were most of a
// crawl's CPU (docs/PERFORMANCE.md, session 21).
//
// Durability: Ingest appends a batch's bodies and syncs them before the
// Pebble batch that points at them (E values, cursors, the segment tail
// below) is committed, so a durable pointer never names bytes that are
// not. Records past the committed tail are bodies whose batch did not
// commit (a crash, a lost dedup race): garbage nothing points at. A
// writable open starts appending after the committed tail and removes the
// segments past it; a read-only open changes nothing.
//
// Bodies superseded later (a damaged primary replaced by a fresh copy, a
// deleted event) stay in their segment: there is no garbage collection.
//
// Where the file system allows, the writer bypasses the page cache
// (O_DIRECT): copying a crawl's bodies into the page cache was the largest
// single cost left of storing them (2.6 CPU-s per GB on ext4 here, 0.2
// direct; docs/PERFORMANCE.md, session 23), and nothing reads them back
// soon (the verify pool takes them from memory, see hot.go). Direct writes
// go in whole aligned blocks: the last, partial block of each write is
// kept in memory and written again, with what follows it, by the next
// one, and the zeros that pad it out lie past the committed tail, where
// no reader looks. Where O_DIRECT is refused, writes go through the page
// cache as before.
const (
	segDirName    = "segments"
	segExt        = ".seg"
	segRecHeader  = 8
	segRollSize   = 256 << 20 // a segment takes no more records once this big
	segMaxOpen    = 64        // read handles kept open (least recently used closed)
	segWriteChunk = 4 << 20   // a batch's records are written this much at a time
	dioAlign      = 4096      // direct writes: offset, length and memory aligned to this
)

// segTailKey holds the end of the last record any committed batch wrote:
// segment (uint32 BE) | offset (uint32 BE). It is written in the batch of
// the E values it covers.
var segTailKey = []byte{prefixInternal, 's', 'e', 'g', 't', 'a', 'i', 'l'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// segPos is a place in the log: a segment and an offset in it.
type segPos struct{ seg, off uint32 }

func (p segPos) less(q segPos) bool {
	return p.seg < q.seg || (p.seg == q.seg && p.off < q.off)
}

func decodeSegPos(v []byte) (segPos, bool) {
	if len(v) != 8 {
		return segPos{}, false
	}
	return segPos{binary.BigEndian.Uint32(v), binary.BigEndian.Uint32(v[4:])}, true
}

func (p segPos) encode() []byte {
	return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, p.seg), p.off)
}

// segLoc is where one body is: its record's position and the body's length.
type segLoc struct {
	segPos
	n uint32
}

// segments is the log of one store.
type segments struct {
	fs       vfs.FS
	dir      string // DIR/segments
	readOnly bool
	sync     bool  // sync appends (the store is not NoSync)
	rollSize int64 // segRollSize; tests make it small
	// alignAlways writes in whole blocks where O_DIRECT is refused too:
	// crash tests on an in-memory file system (no descriptors) take the
	// direct path's bookkeeping that way.
	alignAlways bool

	wmu    sync.Mutex
	w      *segFile // the segment appended to; nil until the first append
	wPos   segPos   // where the next record goes
	direct bool     // w is written around the page cache (O_DIRECT)
	wBuf   []byte   // aligned; while direct, its first wHead bytes are those of wPos's block before wPos
	wHead  int
	failed error // a failed write: the tail of w is unknown

	// smu guards the shared sync (syncTo): synced is where the records
	// known durable end, syncing says a sync is in flight, scond wakes
	// those waiting for it.
	smu     sync.Mutex
	scond   sync.Cond
	syncing bool
	synced  segPos

	// tail is the committed tail (segTailKey's value), moved under the
	// store's ingestMu; openTail is its value at open, where the writer
	// starts (nothing moves it before the first append).
	tail, openTail segPos

	rmu   sync.Mutex
	open  map[uint32]*segFile // read handles
	clock uint64
}

// segFile is an open segment file shared by its users.
type segFile struct {
	f       vfs.File
	num     uint32
	refs    int // users, plus one while it is in a cache or the writer
	lastUse uint64
}

func segName(dir string, num uint32) string {
	return filepath.Join(dir, fmt.Sprintf("%06d%s", num, segExt))
}

// openSegments opens the log in dir/segments whose committed tail is tail
// (segment 0: no batch ever wrote one). A writable open removes the
// segments after the tail's, which no committed batch points into.
func openSegments(fs vfs.FS, dir string, tail segPos, readOnly, sync bool) (*segments, error) {
	g := &segments{fs: fs, dir: filepath.Join(dir, segDirName), readOnly: readOnly, sync: sync, rollSize: segRollSize, tail: tail, openTail: tail, open: map[uint32]*segFile{}}
	g.scond.L = &g.smu
	if readOnly {
		return g, nil
	}
	nums, err := g.list()
	if err != nil {
		return nil, err
	}
	removed := false
	for _, n := range nums {
		if n > tail.seg {
			if err := fs.Remove(segName(g.dir, n)); err != nil {
				return nil, fmt.Errorf("rawstore: remove uncommitted segment: %w", err)
			}
			removed = true
		}
	}
	if removed && sync {
		if err := g.syncDir(); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// list returns the segment numbers in the log's directory, ascending.
func (g *segments) list() ([]uint32, error) {
	names, err := g.fs.List(g.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rawstore: list segments: %w", err)
	}
	var nums []uint32
	for _, name := range names {
		n, err := strconv.ParseUint(strings.TrimSuffix(name, segExt), 10, 32)
		if err == nil && strings.HasSuffix(name, segExt) {
			nums = append(nums, uint32(n))
		}
	}
	slices.Sort(nums)
	return nums, nil
}

func (g *segments) syncDir() error { return syncDir(g.fs, g.dir) }

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// startWriter opens the segment appends go to: the tail's own, when it
// ends exactly at the tail (no crash left uncommitted records in it) and
// has room; else a new one after it, so that appends never land amid
// garbage. Called with wmu held.
func (g *segments) startWriter() error {
	if err := g.fs.MkdirAll(g.dir, 0o755); err != nil {
		return err
	}
	if g.sync {
		// The log's directory must survive a crash too.
		if err := syncDir(g.fs, filepath.Dir(g.dir)); err != nil {
			return err
		}
	}
	t := g.openTail
	pos := segPos{seg: t.seg + 1}
	if t.seg > 0 && int64(t.off) < g.rollSize {
		// Direct writes pad the last block with zeros: anything past the
		// tail's block is a batch that never committed.
		if fi, err := g.fs.Stat(segName(g.dir, t.seg)); err == nil && fi.Size() >= int64(t.off) && fi.Size() <= alignUp(int64(t.off)) {
			pos = t
		}
	}
	return g.use(pos)
}

func alignUp(n int64) int64 { return (n + dioAlign - 1) &^ (dioAlign - 1) }

// use makes the segment of pos the one appended to, from pos.off on.
func (g *segments) use(pos segPos) error {
	f, err := g.fs.OpenReadWrite(segName(g.dir, pos.seg), vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if pos.off == 0 && g.sync {
		// A new file's name must survive a crash with its records.
		if err := g.syncDir(); err != nil {
			_ = f.Close()
			return err
		}
	}
	if g.wBuf == nil {
		g.wBuf = alignedBuf(segWriteChunk + dioAlign)
	}
	// The bytes of pos's block before pos are read before the descriptor
	// turns direct: direct reads would need alignment too.
	head := int(pos.off % dioAlign)
	if head > 0 {
		if _, err := f.ReadAt(g.wBuf[:head], int64(pos.off)-int64(head)); err != nil {
			_ = f.Close()
			return err
		}
	}
	g.w, g.wPos, g.wHead = &segFile{f: f, num: pos.seg, refs: 1}, pos, 0
	if g.direct = setDirect(f, true) == nil || g.alignAlways; g.direct {
		g.wHead = head
	}
	return nil
}

// alignedBuf returns n zeroed bytes whose address is a multiple of
// dioAlign, as direct writes need.
func alignedBuf(n int) []byte {
	b := make([]byte, n+dioAlign)
	off := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (dioAlign - 1))
	if off != 0 {
		off = dioAlign - off
	}
	return b[off : off+n : off+n]
}

// roll syncs the current segment (its records' batches may not have
// synced them yet) and starts the next. Called with wmu held.
func (g *segments) roll() error {
	if g.sync {
		if err := g.w.f.SyncData(); err != nil {
			return err
		}
	}
	old := g.w
	g.w = nil
	g.release(old)
	return g.use(segPos{seg: old.num + 1})
}

// release drops a reference to sf, closing it with the last one.
func (g *segments) release(sf *segFile) {
	g.rmu.Lock()
	sf.refs--
	last := sf.refs == 0
	g.rmu.Unlock()
	if last {
		_ = sf.f.Close()
	}
}

// appendBodies writes a record for each body, in order, and returns where
// each is and the end of the last one. It does not sync (see syncTo).
func (g *segments) appendBodies(bodies [][]byte) ([]segLoc, segPos, error) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if g.failed != nil {
		return nil, segPos{}, g.failed
	}
	if g.readOnly {
		return nil, segPos{}, errors.New("read-only")
	}
	if g.w == nil {
		if err := g.startWriter(); err != nil {
			return nil, segPos{}, err
		}
	}
	locs := make([]segLoc, len(bodies))
	// buf holds the bytes from file offset bufOff on: while direct, the
	// start of wPos's block (wHead bytes), then the new records.
	buf := g.wBuf[:g.wHead]
	bufOff := int64(g.wPos.off) - int64(g.wHead)
	fresh := false // buf holds records not written yet
	flush := func() error {
		if !fresh {
			return nil
		}
		if err := g.writeAt(buf, bufOff); err != nil {
			g.failed = fmt.Errorf("segment %d: %w", g.wPos.seg, err)
			return g.failed
		}
		keep := 0
		if g.direct {
			keep = len(buf) % dioAlign // bufOff is aligned: the partial last block
			copy(buf, buf[len(buf)-keep:])
		}
		bufOff += int64(len(buf) - keep)
		buf, fresh = buf[:keep], false
		return nil
	}
	for i, raw := range bodies {
		n := segRecHeader + len(raw)
		if int64(n) > segRollSize {
			return nil, segPos{}, fmt.Errorf("event body of %d bytes", len(raw))
		}
		if int64(g.wPos.off)+int64(n) > g.rollSize && g.wPos.off > 0 {
			if err := flush(); err != nil {
				return nil, segPos{}, err
			}
			if err := g.roll(); err != nil {
				g.failed = fmt.Errorf("segment %d: %w", g.wPos.seg, err)
				return nil, segPos{}, g.failed
			}
			buf, bufOff = buf[:0], 0
		}
		if len(buf)+n+dioAlign > cap(buf) { // room for the record and a direct write's padding
			if err := flush(); err != nil {
				return nil, segPos{}, err
			}
			if len(buf)+n+dioAlign > cap(buf) { // a body bigger than the buffer
				bigger := alignedBuf(len(buf) + n + dioAlign)
				buf = bigger[:copy(bigger, buf)]
			}
		}
		locs[i] = segLoc{segPos: g.wPos, n: uint32(len(raw))}
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(raw)))
		buf = binary.BigEndian.AppendUint32(buf, crc32.Checksum(raw, castagnoli))
		buf = append(buf, raw...)
		g.wPos.off += uint32(n)
		fresh = true
		if len(buf) >= segWriteChunk {
			if err := flush(); err != nil {
				return nil, segPos{}, err
			}
		}
	}
	if err := flush(); err != nil {
		return nil, segPos{}, err
	}
	if cap(buf) > segWriteChunk*2 { // a bigger one is let go
		small := alignedBuf(segWriteChunk + dioAlign)
		buf = small[:copy(small, buf)]
	}
	g.wBuf, g.wHead = buf[:cap(buf)], len(buf)
	return locs, g.wPos, nil
}

// writeAt writes buf at off in the segment appended to; while direct, in
// whole blocks, the last one padded with zeros (buf has the room: see
// appendBodies). A file system that takes O_DIRECT but not the write gets
// it again through the page cache, and every later one.
func (g *segments) writeAt(buf []byte, off int64) error {
	if !g.direct {
		_, err := g.w.f.WriteAt(buf, off)
		return err
	}
	padded := buf[:alignUp(int64(len(buf)))]
	clear(padded[len(buf):])
	_, err := g.w.f.WriteAt(padded, off)
	if errors.Is(err, syscall.EINVAL) {
		if setDirect(g.w.f, false) == nil {
			g.direct = false
			_, err = g.w.f.WriteAt(padded, off)
		}
	}
	return err
}

// syncTo makes every record before end durable: a segment before the
// current one was synced when it was rolled. Concurrent ingests share
// syncs: one in flight covers every record written before it started, so
// a caller whose records it covers waits for it instead of starting its
// own (one fdatasync per concurrent ingest queued at the disk, each
// waiting for the others: docs/PERFORMANCE.md, session 34).
func (g *segments) syncTo(end segPos) error {
	g.smu.Lock()
	for g.syncing && g.synced.less(end) {
		g.scond.Wait()
	}
	if !g.synced.less(end) {
		g.smu.Unlock()
		return nil
	}
	g.syncing = true
	g.smu.Unlock()
	covered, err := g.syncWriter(end)
	g.smu.Lock()
	g.syncing = false
	if err == nil && g.synced.less(covered) {
		g.synced = covered
	}
	g.scond.Broadcast()
	g.smu.Unlock()
	return err
}

// syncWriter syncs the segment appended to, if end is in it, and returns
// what is durable after: every record appended before the sync started.
func (g *segments) syncWriter(end segPos) (segPos, error) {
	g.wmu.Lock()
	if g.failed != nil {
		g.wmu.Unlock()
		return segPos{}, g.failed
	}
	w, covered := g.w, g.wPos
	if w == nil || end.seg < w.num {
		g.wmu.Unlock()
		return end, nil
	}
	g.rmu.Lock()
	w.refs++ // a roll meanwhile must not close it under the sync
	g.rmu.Unlock()
	g.wmu.Unlock()
	defer g.release(w)
	return covered, w.f.SyncData()
}

// read returns the body at loc, checked against its record's length and
// checksum; a record that does not match, or a segment that is missing
// or too short, is a *CorruptError of key.
func (g *segments) read(key []byte, loc segLoc) (raw []byte, err error) {
	g.readRun([][]byte{key}, []segLoc{loc}, nil, func(_ int, r []byte, e error) { raw, err = r, e })
	return raw, err
}

// readRun reads the records at locs, of one segment and in offset order,
// with one read of the span they cover, into buf if it is big enough, and
// calls fn with each body or its error as read returns them. The bodies
// are in the buffer it returns (buf, or a bigger one) for the next run.
func (g *segments) readRun(keys [][]byte, locs []segLoc, buf []byte, fn func(i int, raw []byte, err error)) []byte {
	fail := func(err error) {
		for i := range locs {
			fn(i, nil, err)
		}
	}
	num := locs[0].seg
	sf, err := g.reader(num)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			for i := range locs {
				fn(i, nil, corrupt(keys[i], fmt.Errorf("segment %d is missing", num)))
			}
			return buf
		}
		fail(fmt.Errorf("rawstore: open segment %d: %w", num, err))
		return buf
	}
	defer g.release(sf)
	start, end := int64(locs[0].off), int64(0)
	for _, l := range locs {
		end = max(end, int64(l.off)+segRecHeader+int64(l.n))
	}
	if int64(cap(buf)) < end-start {
		buf = make([]byte, end-start)
	}
	span := buf[:end-start]
	got, err := sf.f.ReadAt(span, start)
	if err != nil && !errors.Is(err, io.EOF) {
		fail(fmt.Errorf("rawstore: read segment %d at %d: %w", num, start, err))
		return buf
	}
	for i, l := range locs {
		at := int64(l.off) - start
		if at+segRecHeader+int64(l.n) > int64(got) {
			fn(i, nil, corrupt(keys[i], fmt.Errorf("segment %d ends before the record at %d", num, l.off)))
			continue
		}
		rec := span[at : at+segRecHeader+int64(l.n)]
		raw := rec[segRecHeader:]
		switch {
		case binary.BigEndian.Uint32(rec) != l.n:
			fn(i, nil, corrupt(keys[i], fmt.Errorf("segment %d at %d: record of %d bytes, want %d", num, l.off, binary.BigEndian.Uint32(rec), l.n)))
		case crc32.Checksum(raw, castagnoli) != binary.BigEndian.Uint32(rec[4:]):
			fn(i, nil, corrupt(keys[i], fmt.Errorf("segment %d at %d: checksum mismatch", num, l.off)))
		default:
			fn(i, raw, nil)
		}
	}
	return buf
}

// reader returns a read handle on segment num, referenced for the caller
// (release it), opening it if needed and closing the least recently used
// idle handles beyond segMaxOpen.
func (g *segments) reader(num uint32) (*segFile, error) {
	g.rmu.Lock()
	g.clock++
	if sf, ok := g.open[num]; ok {
		sf.refs++
		sf.lastUse = g.clock
		g.rmu.Unlock()
		return sf, nil
	}
	g.rmu.Unlock()
	f, err := g.fs.Open(segName(g.dir, num))
	if err != nil {
		return nil, err
	}
	g.rmu.Lock()
	defer g.rmu.Unlock()
	if sf, ok := g.open[num]; ok { // opened meanwhile
		_ = f.Close()
		sf.refs++
		return sf, nil
	}
	sf := &segFile{f: f, num: num, refs: 2, lastUse: g.clock}
	g.open[num] = sf
	for len(g.open) > segMaxOpen {
		var lru *segFile
		for _, o := range g.open {
			if o.refs == 1 && (lru == nil || o.lastUse < lru.lastUse) {
				lru = o
			}
		}
		if lru == nil {
			break // all in use: over the bound until they are released
		}
		delete(g.open, lru.num)
		_ = lru.f.Close()
	}
	return sf, nil
}

// close closes every handle.
func (g *segments) close() error {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	var err error
	if g.w != nil {
		if g.sync && g.failed == nil {
			err = g.w.f.SyncData()
		}
		g.release(g.w)
		g.w = nil
	}
	g.rmu.Lock()
	defer g.rmu.Unlock()
	for num, sf := range g.open {
		_ = sf.f.Close()
		delete(g.open, num)
	}
	return err
}

// openSegments opens the store's segment log, on fs, at the committed
// tail its Pebble holds (see segTailKey). A read-only store opens over a
// damaged tail (noted): it only needs the tail to write.
func (s *Store) openSegments(fs vfs.FS) (*segments, error) {
	v, err := s.get(segTailKey)
	if err != nil {
		if !s.opts.ReadOnly || !s.noteDamage(err) {
			return nil, fmt.Errorf("read segment tail: %w", err)
		}
	}
	tail, ok := decodeSegPos(v)
	if !ok && v != nil {
		err := corrupt(segTailKey, fmt.Errorf("segment tail of %d bytes", len(v)))
		if !s.opts.ReadOnly {
			return nil, err
		}
		s.noteDamage(err)
	}
	return openSegments(fs, s.opts.Dir, tail, s.opts.ReadOnly, !s.opts.NoSync)
}
