// Package interop holds tests of the archiver against relay and client
// implementations written by others, run as child processes: the
// @nostr-relay packages (interop/nostr-relay) crawled by the archiver,
// and nostr-tools (interop/nostr-client) reading `archiver serve` over
// REQ, COUNT and NIP-77. It has no code of its own: see the _test.go
// files.
//
// Their dependencies are installed by .ci/install-interop.sh; the tests
// fail (rather than skip) when they are missing, because CI runs the
// installer first.
package interop
