//go:build linux || darwin

package diskguard

import "syscall"

// statfs returns the bytes available to unprivileged users on dir's file
// system: f_bavail, not f_bfree, because the blocks reserved for root are
// not the daemon's to use.
func statfs(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}
