//go:build !linux

package rawstore

import (
	"errors"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// setDirect: direct writes are used on Linux only (elsewhere the flag and
// its alignment rules differ); segments are written through the cache.
func setDirect(vfs.File, bool) error { return errors.ErrUnsupported }
