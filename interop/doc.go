// Package interop holds tests of the archiver against relay
// implementations written by others, run as child processes. It has no
// code of its own: see the _test.go files.
//
// The relays' dependencies are installed by .ci/install-interop.sh; the
// tests fail (rather than skip) when they are missing, because CI runs
// the installer first.
package interop
