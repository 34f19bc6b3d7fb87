// Package relayconn is the WebSocket transport to a Nostr relay: one
// connection with any number of REQs, COUNTs, NIP-42 AUTH and NIP-77
// reconciliations in flight, each ended by the relay's answer, an idle
// timeout or the loss of the connection. It knows nothing of the store:
// what it receives it hands back as Items and Malformed frames.
// DialOptions.NetDial is the seam through which tests serve a relay over
// net.Pipe and run its timeouts in virtual time (testing/synctest).
package relayconn
