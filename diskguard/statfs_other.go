//go:build !linux && !darwin

package diskguard

import "errors"

// statfs is not implemented here: pass Options.Statfs.
func statfs(string) (uint64, error) { return 0, errors.ErrUnsupported }
