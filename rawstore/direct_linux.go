package rawstore

import (
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// setDirect turns O_DIRECT on or off for f's descriptor. It fails where
// f has no descriptor (an in-memory file system) or its file system
// refuses the flag.
func setDirect(f vfs.File, on bool) error {
	fd := f.Fd()
	if fd == vfs.InvalidFd {
		return unix.EINVAL
	}
	fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
	if err != nil {
		return err
	}
	if on {
		fl |= unix.O_DIRECT
	} else {
		fl &^= unix.O_DIRECT
	}
	_, err = unix.FcntlInt(fd, unix.F_SETFL, fl)
	return err
}
