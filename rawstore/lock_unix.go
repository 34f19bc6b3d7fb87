//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package rawstore

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// Pebble locks with fcntl (F_SETLK, F_WRLCK on the whole file), so
// F_GETLK names the holder's pid: no pid file to write, and none to go
// stale. (Writing the pid into LOCK through a second descriptor would
// drop Pebble's lock: closing any descriptor of a file releases the
// process's fcntl locks on it.)

// sharedLock takes a read lock on the existing lock file name without
// creating or writing it. A missing file means no process ever wrote the
// archive with a lock: nothing to exclude.
func sharedLock(name string) (io.Closer, error) {
	f, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return io.NopCloser(nil), nil
	}
	if err != nil {
		return nil, err
	}
	lk := syscall.Flock_t{Type: syscall.F_RDLCK, Whence: io.SeekStart}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk); err != nil {
		f.Close()
		pid, held := lockHolder(name)
		if !held {
			return nil, err
		}
		return nil, &InUseError{Dir: filepath.Dir(name), PID: pid}
	}
	return f, nil
}

// isLockConflict reports whether err is fcntl's answer to a lock held
// elsewhere; only then may lockHolder open (and close) the lock file, since
// closing it in a process holding it would release that process's lock.
func isLockConflict(err error) bool {
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES)
}

// lockHolder reports whether another process holds a conflicting (write)
// lock on name, and its pid.
func lockHolder(name string) (pid int, held bool) {
	f, err := os.Open(name)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil || lk.Type == syscall.F_UNLCK {
		return 0, false
	}
	return int(lk.Pid), true
}
