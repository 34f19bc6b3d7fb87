//go:build linux && cgo

package main

/*
#include <stdlib.h> // defines __GLIBC__ under glibc
#ifdef __GLIBC__
static int isGlibc(void) { return 1; }
#else
static int isGlibc(void) { return 0; }
#endif
*/
import "C"

import (
	"os"
	"strings"
	"syscall"
)

// useHugePages re-executes the process with glibc's huge page tunable set
// (see hugePagesTunable), which glibc reads only at start. The exec keeps
// the process id (systemd's notify socket and PID file stay right), and
// happens before anything else ran; if it fails, the process goes on
// without huge pages.
func useHugePages() {
	if C.isGlibc() == 0 {
		return
	}
	v, changed := withHugePages(os.Getenv("GLIBC_TUNABLES"))
	if !changed {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	env := []string{"GLIBC_TUNABLES=" + v}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GLIBC_TUNABLES=") {
			env = append(env, kv)
		}
	}
	_ = syscall.Exec(exe, os.Args, env)
}
