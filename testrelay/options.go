package testrelay

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/nostr-archiver/archiver/negentropy"
)

// Options configures a Relay. The zero value is a well-behaved relay that
// clamps pages at 500 like strfry; every fault knob is off until set.
// Knobs are read per request, so SetOptions may flip any of them while the
// relay serves, except Addr and QueueDepth (fixed at New).
type Options struct {
	// Addr is the TCP address to listen on. Default "127.0.0.1:0".
	Addr string

	// Info is the NIP-11 document, served verbatim to a GET with
	// `Accept: application/nostr+json` (so a test can make it lie). Nil
	// means a document generated from these options. NoInfo answers 404
	// instead, as many relays do.
	Info   []byte
	NoInfo bool

	// MaxLimit clamps every filter's limit silently, as strfry does.
	// Default 500; negative means no clamp.
	MaxLimit int
	// DefaultLimit is the limit of a filter that has none (then clamped by
	// MaxLimit). Default 500; negative means unlimited.
	DefaultLimit int

	// IgnoreUntil serves every filter as if it had no `until`.
	IgnoreUntil bool
	// SinceExclusive and UntilExclusive read the bounds of a REQ's, COUNT's
	// or NEG-OPEN's filter as
	// strict (since < created_at, created_at < until), as nostr-rs-relay
	// before mid 2023 and relayer did both, against NIP-01.
	SinceExclusive, UntilExclusive bool
	// ExtraOutOfRange adds up to this many stored events just newer than
	// `until` and as many just older than `since` to each page.
	ExtraOutOfRange int

	// MaxSubsPerConn caps open subscriptions per connection (a subscription
	// is open from its REQ until the client CLOSEs it). A REQ over the cap
	// gets only ["NOTICE","ERROR: too many concurrent REQs"], no CLOSED and
	// no EOSE, as strfry does. 0 means no cap.
	MaxSubsPerConn int

	// RateLimit is a token bucket on REQ and COUNT messages, in requests per
	// second (0: off) with RateBurst tokens (default: RateLimit rounded up,
	// at least 1). One bucket per connection, or per client IP with
	// RatePerIP. A request over the limit gets
	// ["CLOSED",sub,"rate-limited: slow down"].
	RateLimit float64
	RateBurst int
	RatePerIP bool

	// ErrorPrefix prefixes the CLOSED reasons for auth and rate limits with
	// "ERROR: " ("ERROR: auth-required: ..."), as strfry does.
	ErrorPrefix bool

	// MaxConnsPerIP refuses WebSocket upgrades past this many open
	// connections from one IP with HTTP 429. 0 means no cap.
	MaxConnsPerIP int

	// DropEvery closes the TCP connection, without a WebSocket close frame,
	// right after the Nth EVENT frame sent on it (counted over the
	// connection's life). 0 means never.
	DropEvery int

	// NoticeOnlyEvery answers every Nth REQ that passes the other checks
	// (counted over the relay) with only a NOTICE: no EVENT, no EOSE, no
	// CLOSED. 0 means never.
	NoticeOnlyEvery int

	// CountNoticeEvery does the same to every Nth COUNT (counted over the
	// relay, apart from REQs): a relay whose COUNT fails now and then.
	CountNoticeEvery int

	// CountCap caps each COUNT answer at this many events and marks a
	// capped answer "approximate": true, as archiver serve does past
	// 1,000,000 (strfry says "limited"). 0 means no cap.
	CountCap int
	// CountCapSilent leaves a capped answer unmarked: a COUNT that
	// undercounts, as a relay counting what a limit-capped query returns
	// does, or eventstore's CountEvents, which counts one event per query
	// when part of the filter is matched on the event (--authors).
	CountCapSilent bool
	// CountApproximate marks every COUNT answer "approximate": true, exact
	// or not, as a relay counting with HyperLogLog (NIP-45) does.
	CountApproximate bool

	// AuthRequired sends ["AUTH",challenge] on connect and refuses REQ and
	// COUNT with CLOSED "auth-required: ..." until the client has sent a
	// valid NIP-42 kind-22242 event for that challenge.
	AuthRequired bool
	// AuthAllow, with AuthRequired, is the whitelist of hex pubkeys the
	// relay serves: a connection authenticated as any other key gets
	// CLOSED "restricted: ..." for its REQs and COUNTs. Nil serves every
	// authenticated key.
	AuthAllow []string

	// SupportCount answers NIP-45 COUNT; otherwise COUNT gets CLOSED
	// "unsupported: ...".
	SupportCount bool

	// Latency delays each page (each REQ's answer) by this much from the
	// time its REQ arrived or a page worker became free, which sets a
	// per-connection cadence: a connection serves at most PageWorkers
	// pages per Latency.
	Latency time.Duration

	// PageWorkers is how many REQs of one connection are in service at
	// once under Latency, as a relay's query workers serve several REQs of
	// one socket concurrently (the seeds measured throughput rising with
	// in-flight REQs up to a per-connection wall). Pages are still written
	// in arrival order. Default 1.
	PageWorkers int

	// Capacity caps the events per second the relay serves across all its
	// connections (its database's limit), 0 meaning none: a page waits
	// until the relay-wide budget has room for it.
	Capacity float64

	// SendLimitsFrame sends an unstandardized ["LIMITS",{...}] frame on
	// connect, as some relays do.
	SendLimitsFrame bool

	// MaxMessageLength is advertised in the generated NIP-11 document; a
	// client frame longer than this drops the connection. 0 means no limit.
	MaxMessageLength int

	// QueueDepth bounds the client messages queued per connection ahead of
	// the connection's writer; past it the reader blocks and TCP pushes back
	// on the client. Default 64.
	QueueDepth int

	// DuplicateEvery sends every Nth event of REQ pages (counted over the
	// relay) twice in a row, inside the page. With DuplicateInLimit the
	// copies count toward the page's clamp, so a cut page holds fewer
	// distinct events than the clamp, as a relay seen in the wild does. 0
	// means never.
	DuplicateEvery   int
	DuplicateInLimit bool

	// OmitEvery silently drops every Nth event from REQ pages (not from
	// lookups by id) (counted over
	// the relay, so another pass drops others) while COUNT still counts it.
	// With OmitForever it drops the same events every time: those whose id
	// hashes to 0 mod N. 0 means never.
	OmitEvery   int
	OmitForever bool
	// RefuseBroad answers a REQ with any filter naming fewer than two of
	// ids (which count two), authors, kinds and tags with an immediate EOSE
	// and no events, as nostr-rs-relay does with limit_scrapers on: an open
	// range then looks like an empty relay.
	RefuseBroad bool
	// EmptyBounded answers a REQ with any filter bounded in time (since
	// or until) with an immediate EOSE and no events, and serves filters
	// without bounds: a relay whose created_at index is broken. Every
	// page of a crawl then finds nothing, yet the relay holds events.
	EmptyBounded bool
	// SplitStores answers each REQ from this many stores (an event's store
	// is picked by its id), each applying the filter's limit on its own,
	// their pages sent one after the other: khatru does so with several
	// QueryEvents functions (responding.go handleRequest runs each and
	// sends what each yields). A page then holds up to SplitStores x limit
	// events and is not the relay's newest limit events: its oldest event
	// can be older than events one store cut off. 0 or 1: one store.
	SplitStores int
	// BrokenEvery makes every event whose id hashes to 0 mod N a dangling
	// index entry: a REQ's scan that reaches it stops there and sends
	// EOSE, never serving it nor anything after it in the page, and a
	// lookup by id finds nothing; COUNT still counts it. The eventstore
	// badger backend (khatru relays: wot-relay, haven) returns from a scan
	// whose raw-event lookup fails ("badger: failed to get ... from raw
	// event store: Key not found", wot-relay issue 80), so its pages end
	// early, and an empty one looks like the end of the range. 0: never.
	BrokenEvery int
	// TiesDescending orders the events of one created_at second by id
	// descending, against NIP-01's lowest id first. No relay read here
	// follows NIP-01: strfry orders ties by insertion (newest first),
	// eventstore's badger and lmdb by serial, nostr-rs-relay and nostream
	// leave them to the database (ORDER BY created_at alone).
	TiesDescending bool
	// PageOrder picks which events of a filter's range a clamped page
	// holds, against NIP-01's newest first: PageOldest the range's oldest
	// (a relay that sorts ascending), PageByID the lowest ids (one that
	// scans a table keyed by id and stops at the limit). Paging by until
	// from either page's oldest event skips most of the range. "": newest.
	PageOrder string
	// OrderedPages, with PageOrder, serves the relay's first N REQs
	// newest-first as NIP-01 says and only later ones in PageOrder: a relay
	// whose order breaks partway through a crawl (another store taking
	// over, say).
	OrderedPages int64
	// ClosedEvery cuts every Nth REQ page (counted over the relay) after
	// half its events with ["CLOSED",sub,"error: the relay could not
	// respond fast enough"], as Ditto does when its query times out. 0:
	// never.
	ClosedEvery int
	// FailQueryEvery answers every Nth REQ page (counted over the relay)
	// with ["NOTICE","error: failed to query"] and then EOSE, no event: a
	// khatru relay whose QueryEvents function fails writes the error as a
	// NOTICE (naming no subscription) and still sends EOSE (responding.go
	// handleRequest). 0: never.
	FailQueryEvery int
	// EOSEFirstEvery answers every Nth REQ page (counted over the relay)
	// with its EOSE first and then its events, as a relay does that
	// signals the end of its stored events when its query starts, or that
	// relays others (a bouncer: bostr sends EOSE, then more events). 0:
	// never.
	EOSEFirstEvery int
	// EOSEFirstRun makes each EOSEFirstEvery-th REQ the first of that
	// many in a row answered so, and the first EOSEFirstRun-1 REQs too
	// (REQ n is when n mod EOSEFirstEvery < EOSEFirstRun): asked again,
	// the relay answers a page before its events again. 0: 1.
	EOSEFirstRun int
	// EOSEFirstDropped never sends the events of a page answered EOSE
	// first once the client has closed it: a bouncer that stops its
	// upstream query at the CLOSE. The page is silently empty.
	EOSEFirstDropped bool
	// EOSEFirstSplit sends all but the first quarter of such a page's
	// events this much after the first quarter: a bouncer whose upstreams
	// answer at different speeds. 0: all at once.
	EOSEFirstSplit time.Duration
	// RejectLimitZero closes a REQ with a filter whose limit is 0 with
	// ["CLOSED",sub,"invalid: limit 0"], as a relay that takes 0 for a
	// bad limit does (khatru once answered a NEG-OPEN so), instead of
	// sending no stored event and then what is published (NIP-01, khatru's
	// REQs today).
	RejectLimitZero bool
	// NIP77 answers NEG-OPEN, NEG-MSG and NEG-CLOSE (negentropy) and lists
	// 77 in NIP-11. Off, NEG-OPEN gets ["NOTICE","ERROR: unknown cmd: ..."].
	NIP77 bool
	// ListNIP77 lists 77 in the NIP-11 document even with NIP77 off (a
	// relay that claims NIP-77 and refuses it).
	ListNIP77 bool
	// NegNoticeOnly answers every NEG-* with only ["NOTICE","ERROR: bad
	// msg: negentropy disabled"], as strfry with negentropy off does.
	NegNoticeOnly bool
	// NegMaxRecords refuses a NEG-OPEN whose filter matches more events
	// with NEG-ERR "blocked: too many records", naming the cap
	// (", max N") if NegCapInReason. 0 means no cap.
	NegMaxRecords  int
	NegCapInReason bool
	// NegCut builds each reconciliation's set from the filter's newest
	// NegCut events only, silently, as khatru does over an eventstore
	// backend (its QueryEvents caps a filter without a limit at MaxLimit,
	// 500 by default). 0 means the whole set.
	NegCut int
	// NegCloseEvery answers every Nth NEG-MSG (counted over the relay) with
	// NEG-ERR "closed: idle timeout" and forgets that reconciliation, as
	// NegIdleClose does to one idle that long. 0 means never.
	NegCloseEvery int
	NegIdleClose  time.Duration
	// NegFrameLimit bounds the relay's negentropy messages (0: none, else
	// at least 4096).
	NegFrameLimit int
	// NegResponder, if set, builds the relay side of each reconciliation
	// (a test plugs in someone else's implementation); nil means ours.
	NegResponder func(items []negentropy.Item, frameLimit int) (NegResponder, error)
}

// Defaults.
const (
	DefaultAddr       = "127.0.0.1:0"
	DefaultMaxLimit   = 500
	DefaultQueueDepth = 64
)

// withDefaults returns o with every unset field at its documented default.
func (o Options) withDefaults() Options {
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.MaxLimit == 0 {
		o.MaxLimit = DefaultMaxLimit
	}
	if o.DefaultLimit == 0 {
		o.DefaultLimit = DefaultMaxLimit
	}
	if o.RateLimit > 0 && o.RateBurst == 0 {
		o.RateBurst = max(1, int(o.RateLimit+0.999999))
	}
	if o.QueueDepth == 0 {
		o.QueueDepth = DefaultQueueDepth
	}
	if o.PageWorkers == 0 {
		o.PageWorkers = 1
	}
	return o
}

// ErrInvalidOptions is wrapped by every error Validate returns.
var ErrInvalidOptions = errors.New("testrelay: invalid options")

// Validate reports the first option that cannot work.
func (o Options) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	if _, _, err := net.SplitHostPort(o.Addr); o.Addr != "" && err != nil {
		return bad("addr %q: %v", o.Addr, err)
	}
	switch {
	case o.ExtraOutOfRange < 0:
		return bad("ExtraOutOfRange %d < 0", o.ExtraOutOfRange)
	case o.MaxSubsPerConn < 0:
		return bad("MaxSubsPerConn %d < 0", o.MaxSubsPerConn)
	case o.RateLimit < 0:
		return bad("RateLimit %v < 0", o.RateLimit)
	case o.RateBurst < 0:
		return bad("RateBurst %d < 0", o.RateBurst)
	case o.MaxConnsPerIP < 0:
		return bad("MaxConnsPerIP %d < 0", o.MaxConnsPerIP)
	case o.DropEvery < 0:
		return bad("DropEvery %d < 0", o.DropEvery)
	case o.NoticeOnlyEvery < 0:
		return bad("NoticeOnlyEvery %d < 0", o.NoticeOnlyEvery)
	case o.CountNoticeEvery < 0 || o.CountCap < 0:
		return bad("CountNoticeEvery %d and CountCap %d must not be negative", o.CountNoticeEvery, o.CountCap)
	case o.Latency < 0:
		return bad("Latency %v < 0", o.Latency)
	case o.PageWorkers < 0:
		return bad("PageWorkers %d < 0", o.PageWorkers)
	case o.Capacity < 0:
		return bad("Capacity %v < 0", o.Capacity)
	case o.MaxMessageLength < 0:
		return bad("MaxMessageLength %d < 0", o.MaxMessageLength)
	case o.NegMaxRecords < 0 || o.NegCloseEvery < 0 || o.NegIdleClose < 0 || o.NegCut < 0:
		return bad("NegMaxRecords, NegCloseEvery, NegIdleClose and NegCut must not be negative")
	case o.NegFrameLimit != 0 && o.NegFrameLimit < negentropy.MinFrameSizeLimit:
		return bad("NegFrameLimit %d below %d", o.NegFrameLimit, negentropy.MinFrameSizeLimit)
	case o.QueueDepth < 0:
		return bad("QueueDepth %d < 0", o.QueueDepth)
	case o.PageOrder != "" && o.PageOrder != PageOldest && o.PageOrder != PageByID:
		return bad("PageOrder %q is none of %q, %q", o.PageOrder, PageOldest, PageByID)
	case o.OrderedPages < 0:
		return bad("OrderedPages %d < 0", o.OrderedPages)
	case o.DuplicateEvery < 0:
		return bad("DuplicateEvery %d < 0", o.DuplicateEvery)
	case o.OmitEvery < 0:
		return bad("OmitEvery %d < 0", o.OmitEvery)
	case o.SplitStores < 0 || o.BrokenEvery < 0 || o.ClosedEvery < 0 || o.FailQueryEvery < 0 || o.EOSEFirstEvery < 0 || o.EOSEFirstRun < 0 || o.EOSEFirstSplit < 0:
		return bad("SplitStores, BrokenEvery, ClosedEvery, FailQueryEvery, EOSEFirstEvery, EOSEFirstRun and EOSEFirstSplit must not be negative")
	}
	return nil
}
