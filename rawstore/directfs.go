package rawstore

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// directFS has Pebble write the tables and blob files of its memtable
// flushes around the page cache (O_DIRECT), where the file system allows
// it. A flush writes each table once, start to end, on the heels of the
// commits, and Pebble reads it through its own block cache: copying it
// into the page cache as well cost about as much CPU as the rest of
// writing it (docs/PERFORMANCE.md, session 25). Compaction outputs stay
// buffered: with them direct too, a crawl of events the archive already
// held (every lookup reading the tables) peaked at 225-249 MB of RSS
// instead of 200-227. The WAL (which Pebble recycles and syncs at every
// commit), the manifest and the options file are left alone as well.
type directFS struct {
	vfs.FS
	made *atomic.Int64 // files written directly, for tests
}

// flushWrites is the category Pebble creates a flush's files with.
const flushWrites vfs.DiskWriteCategory = "pebble-memtable-flush"

// directWriteChunk is how much of a table a directFile gathers before it
// writes: Pebble hands it blocks of a few KiB.
const directWriteChunk = 256 << 10

// directKind reports whether Pebble writes name once, sequentially: its
// tables and blob files.
func directKind(name string) bool {
	return strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob")
}

func (fs directFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	if err != nil || category != flushWrites || !directKind(name) || setDirect(f, true) != nil {
		return f, err
	}
	fs.made.Add(1)
	return &directFile{File: f, name: name, buf: alignedBuf(directWriteChunk)[:0]}, nil
}

// errDirectRead: a table being written is not read through its writer
// (direct reads would need aligned buffers too).
var errDirectRead = errors.New("rawstore: a table being written is not read through its writer")

// directFile writes in whole aligned blocks. buf holds the bytes from
// file offset off (aligned) on; Sync writes its partial last block padded
// with zeros and truncates the file to the bytes written, and later writes
// write that block again with what follows it.
type directFile struct {
	vfs.File
	name string
	buf  []byte
	off  int64
	// sized: the file's length on disk is off+len(buf) (a sync or close
	// wrote the tail and truncated): Close need not write again.
	sized bool
	err   error // sticky: a failed write leaves the file's tail unknown
}

func (f *directFile) Write(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	n := len(p)
	for len(p) > 0 {
		c := copy(f.buf[len(f.buf):cap(f.buf)], p)
		f.buf = f.buf[:len(f.buf)+c]
		p = p[c:]
		if len(f.buf) == cap(f.buf) {
			if err := f.writeBlocks(len(f.buf)); err != nil {
				return n - len(p), err
			}
		}
	}
	f.sized = false
	return n, nil
}

// writeBlocks writes buf's first n bytes (a multiple of dioAlign) at off
// and keeps the rest at buf's start.
func (f *directFile) writeBlocks(n int) error {
	if err := f.writeAt(f.buf[:n]); err != nil {
		return err
	}
	rest := copy(f.buf, f.buf[n:])
	f.buf = f.buf[:rest]
	f.off += int64(n)
	return nil
}

// writeAt writes whole blocks at off. A file system that takes O_DIRECT
// but not the write gets it through the page cache.
func (f *directFile) writeAt(b []byte) error {
	_, err := f.File.WriteAt(b, f.off)
	if errors.Is(err, syscall.EINVAL) && setDirect(f.File, false) == nil {
		_, err = f.File.WriteAt(b, f.off)
	}
	if err != nil {
		f.err = fmt.Errorf("rawstore: write %s: %w", f.name, err)
	}
	return f.err
}

// writeTail writes what buf holds, its last block padded with zeros, and
// truncates the file to the bytes written: the partial block stays in buf,
// to be written again with what follows it.
func (f *directFile) writeTail() error {
	if f.err != nil || f.sized {
		return f.err
	}
	size := f.off + int64(len(f.buf))
	if len(f.buf)%dioAlign != 0 {
		padded := f.buf[:alignUp(int64(len(f.buf)))] // buf is never full here: Write writes a full one
		clear(padded[len(f.buf):])
		if err := f.writeAt(padded); err != nil {
			return err
		}
		full := len(f.buf) &^ (dioAlign - 1)
		rest := copy(f.buf, f.buf[full:])
		f.buf = f.buf[:rest]
		f.off += int64(full)
		if err := truncateFile(f.File, size); err != nil {
			f.err = fmt.Errorf("rawstore: truncate %s: %w", f.name, err)
			return f.err
		}
	} else if err := f.writeBlocks(len(f.buf)); err != nil {
		return err
	}
	f.sized = true
	return nil
}

func (f *directFile) Sync() error {
	if err := f.writeTail(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *directFile) SyncData() error {
	if err := f.writeTail(); err != nil {
		return err
	}
	return f.File.SyncData()
}

// SyncTo asks for write-back of a prefix; the blocks written so far went
// to the device already, and the rest waits for Sync.
func (f *directFile) SyncTo(int64) (bool, error) { return false, f.err }

func (f *directFile) Close() error {
	err := f.writeTail()
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	return err
}

func (f *directFile) Stat() (vfs.FileInfo, error) {
	fi, err := f.File.Stat()
	if err != nil {
		return nil, err
	}
	return sizedInfo{fi, f.off + int64(len(f.buf))}, nil
}

func (f *directFile) Read([]byte) (int, error)           { return 0, errDirectRead }
func (f *directFile) ReadAt([]byte, int64) (int, error)  { return 0, errDirectRead }
func (f *directFile) WriteAt([]byte, int64) (int, error) { return 0, errDirectRead }

// sizedInfo reports the bytes written to a directFile, some of which may
// still be in its buffer.
type sizedInfo struct {
	vfs.FileInfo
	size int64
}

func (i sizedInfo) Size() int64 { return i.size }
