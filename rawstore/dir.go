package rawstore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrNotArchive is returned by Open with NoCreate or ReadOnly when Dir is
// missing or holds no archive: a mistyped --data, or another program's
// directory, which must not gain Pebble files.
var ErrNotArchive = errors.New("not an archive")

// ErrInUse is returned by Open when another process holds the archive
// (errors.As finds an *InUseError with its pid).
var ErrInUse = errors.New("archive in use by another archiver")

// InUseError names the process holding an archive's lock.
type InUseError struct {
	Dir string
	PID int // 0 when the lock's holder could not be learned
}

func (e *InUseError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("%s: archive in use by another archiver", e.Dir)
	}
	return fmt.Sprintf("%s: archive in use by another archiver (pid %d)", e.Dir, e.PID)
}

func (e *InUseError) Is(target error) bool { return target == ErrInUse }

// lockName is Pebble's lock file (base.FileTypeLock).
const lockName = "LOCK"

// isArchive reports whether dir holds a Pebble store: every store since
// Pebble's atomic markers has a marker.manifest.* file, written before the
// first key.
func isArchive(fs vfs.FS, dir string) error {
	names, err := fs.List(dir)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %w (no such directory)", dir, ErrNotArchive)
	}
	if err != nil {
		return fmt.Errorf("rawstore: list %s: %w", dir, err)
	}
	for _, n := range names {
		if strings.HasPrefix(n, "marker.manifest.") {
			return nil
		}
	}
	return fmt.Errorf("%s: %w (no archive files in it)", dir, ErrNotArchive)
}

// readOnlyFS is the FS of a ReadOnly store: Pebble's own lock creates (and
// truncates) the LOCK file and takes it exclusively, which a read-only
// directory refuses and a running daemon blocks. Instead the store takes a
// shared lock on the existing file: readers coexist, a writer is kept out
// (and told who holds it), and nothing is written.
type readOnlyFS struct {
	vfs.FS
	real bool // the OS file system: fcntl locks apply
}

func (fs readOnlyFS) Lock(name string) (io.Closer, error) {
	if !fs.real {
		return io.NopCloser(nil), nil
	}
	return sharedLock(name)
}

// inUse turns a failed exclusive lock of dir into an *InUseError, or
// returns err unchanged when the lock is not held by someone else.
func inUse(dir string, err error) error {
	if !isLockConflict(err) {
		return err
	}
	pid, held := lockHolder(dir + string(os.PathSeparator) + lockName)
	if !held {
		return err
	}
	return &InUseError{Dir: dir, PID: pid}
}
