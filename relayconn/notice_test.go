package relayconn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lxzan/gws"
)

// A khatru relay whose QueryEvents fails writes the error as a NOTICE,
// naming no subscription, then sends EOSE (responding.go): with a newer
// REQ also waiting, the NOTICE is pinned on that one, and the failed REQ's
// empty EOSE must not read as an empty range (a crawl ends a shard on it).
func TestNoticeThenEmptyEOSE(t *testing.T) {
	aArrived, bArrived := make(chan struct{}), make(chan struct{})
	p := &pipeRelay{onMsg: onReq(func(s relaySide, sub string) {
		switch sub[len(sub)-1] {
		case '1': // the first REQ: fails once the second is in flight
			close(aArrived)
			<-bArrived
			_ = s.WriteMessage(gws.OpcodeText, []byte(`["NOTICE","error: failed to query"]`))
			_ = s.WriteMessage(gws.OpcodeText, []byte(`["EOSE","`+sub+`"]`))
		default:
			close(bArrived)
		}
	})}
	c := pipeDial(t, p)
	defer c.Close()
	var wg sync.WaitGroup
	var first *Page
	wg.Add(1)
	go func() {
		defer wg.Done()
		page, err := c.Req(context.Background(), []byte(`{"limit":10}`), 10, 5*time.Second)
		if err != nil {
			t.Error(err)
		}
		first = page
	}()
	<-aArrived // the second REQ goes out once the relay has the first
	second, err := c.Req(context.Background(), []byte(`{"limit":10}`), 10, 5*time.Second)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if first == nil || first.End == EndEOSE {
		t.Fatalf("the failed REQ ended %v: an empty EOSE after a NOTICE is no empty page", first.End)
	}
	if second.End == EndEOSE {
		t.Fatalf("the second REQ ended %v", second.End)
	}
}

// Events that come for a page after its EOSE (a relay that sends EOSE
// before its events, a bouncer relaying others late) are kept for
// TakeLate, not dropped: they are the relay's events all the same. Frames
// for a subscription this connection never opened are not.
func TestLateEventsKept(t *testing.T) {
	p := &pipeRelay{onMsg: onReq(func(s relaySide, sub string) {
		switch sub[len(sub)-1] {
		case '1': // the first page: EOSE before anything
			_ = s.WriteMessage(gws.OpcodeText, []byte(`["EOSE","`+sub+`"]`))
		default: // the second: the first's events, late, go out before it
			for i := range 2 {
				_ = s.WriteMessage(gws.OpcodeText, []byte(`["EVENT","a1",`+testEvent(i)+`]`))
			}
			_ = s.WriteMessage(gws.OpcodeText, []byte(`["EVENT","a99",`+testEvent(7)+`]`))
			_ = s.WriteMessage(gws.OpcodeText, []byte(`["EVENT","x1",`+testEvent(8)+`]`))
			_ = s.WriteMessage(gws.OpcodeText, []byte(`["EOSE","`+sub+`"]`))
		}
	})}
	c := pipeDial(t, p)
	defer c.Close()
	for want := range 2 {
		page, err := c.Req(context.Background(), []byte(`{"limit":10}`), 10, 5*time.Second)
		if err != nil || page.End != EndEOSE || len(page.Items) != 0 {
			t.Fatalf("page %d: %v, %+v", want+1, err, page)
		}
	}
	late := c.TakeLate()
	if len(late.Items) != 2 || late.Items[0].CreatedAt != 1700000000 || late.Items[1].CreatedAt != 1700000001 {
		t.Fatalf("late events %+v, want the first page's two", late.Items)
	}
	if !anyAfterEOSE(late) {
		t.Fatal("events after their page's EOSE not said to be")
	}
	if again := c.TakeLate(); len(again.Items) != 0 || anyAfterEOSE(again) {
		t.Fatalf("taken twice: %+v", again)
	}
}

// A relay that floods a page after its EOSE makes the connection hold at
// most maxLate of its events until they are taken.
func TestLateEventsBounded(t *testing.T) {
	p := &pipeRelay{onMsg: onReq(func(s relaySide, sub string) {
		if sub[len(sub)-1] == '2' {
			for i := range maxLate + 100 {
				_ = s.WriteMessage(gws.OpcodeText, []byte(`["EVENT","a1",`+testEvent(i)+`]`))
			}
		}
		_ = s.WriteMessage(gws.OpcodeText, []byte(`["EOSE","`+sub+`"]`))
	})}
	c := pipeDial(t, p)
	defer c.Close()
	for range 2 {
		if _, err := c.Req(context.Background(), []byte(`{"limit":10}`), 10, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if late := c.TakeLate(); len(late.Items) != maxLate || !anyAfterEOSE(late) {
		t.Fatalf("held %d late events (after EOSE: %v), want the first %d", len(late.Items), anyAfterEOSE(late), maxLate)
	}
}

// With SetLinger, a page ended by its EOSE holds the events its relay
// sends for it within the linger (CLOSEd at its EOSE, the relay had them
// on their way); what comes after the linger is late as ever. In virtual
// time: the relay sends one event 300 ms after the EOSE and one 2 s after.
// A page that holds its limit before its EOSE waits for nothing.
func TestLingerHoldsLateEvents(t *testing.T) {
	for _, tc := range []struct {
		linger     time.Duration
		limit      int // with an event before the EOSE if 1: that page waits for nothing
		held, late int
		took       time.Duration
	}{
		{0, 10, 0, 2, 0},
		{time.Second, 10, 1, 1, time.Second},
		{3 * time.Second, 10, 2, 0, 3 * time.Second},
		{3 * time.Second, 1, 1, 2, 0},
	} {
		t.Run(fmt.Sprintf("%v limit %d", tc.linger, tc.limit), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := &pipeRelay{onMsg: onReq(func(s relaySide, sub string) {
					if tc.limit == 1 {
						_ = s.WriteMessage(gws.OpcodeText, []byte(`["EVENT","`+sub+`",`+testEvent(2)+`]`))
					}
					_ = s.WriteMessage(gws.OpcodeText, []byte(`["EOSE","`+sub+`"]`))
					if s.Sleep(300 * time.Millisecond) {
						_ = s.WriteMessage(gws.OpcodeText, []byte(`["EVENT","`+sub+`",`+testEvent(0)+`]`))
					}
					if s.Sleep(1700 * time.Millisecond) {
						_ = s.WriteMessage(gws.OpcodeText, []byte(`["EVENT","`+sub+`",`+testEvent(1)+`]`))
					}
				})}
				c := pipeDial(t, p)
				defer c.Close()
				c.SetLinger(tc.linger)
				start := time.Now()
				page, err := c.Req(context.Background(), []byte(fmt.Sprintf(`{"limit":%d}`, tc.limit)), tc.limit, 5*time.Second)
				if err != nil || page.End != EndEOSE {
					t.Fatalf("%v, %+v", err, page)
				}
				if took := time.Since(start); took != tc.took {
					t.Errorf("the page took %v, want %v", took, tc.took)
				}
				time.Sleep(3 * time.Second) // virtual: the relay has sent all
				synctest.Wait()
				late := c.TakeLate()
				// A page that held its limit is owed nothing: what comes
				// late is no event of its own.
				if len(page.Items) != tc.held || len(late.Items) != tc.late || anyAfterEOSE(late) != (tc.late > 0 && tc.limit > 1) {
					t.Errorf("page held %d events and %d came late (after EOSE: %v), want %d and %d", len(page.Items), len(late.Items), anyAfterEOSE(late), tc.held, tc.late)
				}
			})
		})
	}
}

// Events that come for a page that ended other than at its EOSE (it went
// idle, a NOTICE or CLOSED refused it, its caller gave up on it, as a
// crawl stopping does) are kept for TakeLate but were on their way: they
// say nothing of the relay's EOSE. (A daemon stopped mid-crawl took them
// as sent after their EOSE, and the honest relay's next crawl ended
// unproven.) Nor do those for a page that held its limit at its EOSE: no
// more of its own can come, and a busy relay sends the events published
// meanwhile to a subscription until the CLOSE reaches it. In virtual
// time: the relay answers the second REQ with the first's three events
// and then the second's EOSE.
func TestLateEventsOfPagesEndedOtherwise(t *testing.T) {
	for _, tc := range []struct {
		name      string
		end       []string // the relay's answer to the first REQ (limit 2)
		ctx       bool     // the caller cancels the first REQ
		want      EndKind
		afterEOSE bool
	}{
		{"idle timeout", nil, false, EndTimeout, false},
		{"NOTICE", []string{`["NOTICE","too many concurrent REQs"]`}, false, EndNotice, false},
		{"CLOSED", []string{`["CLOSED","a1","error: shutting down"]`}, false, EndClosed, false},
		{"caller gave up", nil, true, 0, false},
		{"EOSE holding its limit", []string{`["EVENT","a1",` + testEvent(8) + `]`, `["EVENT","a1",` + testEvent(9) + `]`, `["EOSE","a1"]`}, false, EndEOSE, false},
		{"EOSE short of its limit", []string{`["EVENT","a1",` + testEvent(8) + `]`, `["EOSE","a1"]`}, false, EndEOSE, true},
		{"EOSE, empty", []string{`["EOSE","a1"]`}, false, EndEOSE, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := &pipeRelay{onMsg: onReq(func(s relaySide, sub string) {
					if sub == "a1" {
						for _, f := range tc.end {
							_ = s.WriteMessage(gws.OpcodeText, []byte(f))
						}
						return
					}
					for i := range 3 {
						_ = s.WriteMessage(gws.OpcodeText, []byte(`["EVENT","a1",`+testEvent(i)+`]`))
					}
					_ = s.WriteMessage(gws.OpcodeText, []byte(`["EOSE","`+sub+`"]`))
				})}
				c := pipeDial(t, p)
				defer c.Close()
				ctx, cancel := context.WithCancel(context.Background())
				if tc.ctx {
					time.AfterFunc(time.Second, cancel)
				}
				defer cancel()
				page, err := c.Req(ctx, []byte(`{"limit":2}`), 2, 5*time.Second)
				switch {
				case tc.ctx && err == nil:
					t.Fatalf("the first REQ ended %v, want the caller's cancel", page.End)
				case !tc.ctx && (err != nil || page.End != tc.want):
					t.Fatalf("the first REQ: %v, %+v; want it ended %v", err, page, tc.want)
				}
				if page, err := c.Req(context.Background(), []byte(`{"limit":10}`), 10, 5*time.Second); err != nil || page.End != EndEOSE || len(page.Items) != 0 {
					t.Fatalf("the second REQ: %v, %+v", err, page)
				}
				late := c.TakeLate()
				if len(late.Items) != 3 || len(late.Info) != 3 {
					t.Errorf("%d late events kept (%d infos), want the first page's 3", len(late.Items), len(late.Info))
				}
				if got := anyAfterEOSE(late); got != tc.afterEOSE {
					t.Errorf("after EOSE: %v, want %v", got, tc.afterEOSE)
				}
			})
		})
	}
}

// anyAfterEOSE reports whether l holds an event sent after its page's
// EOSE, or dropped one.
func anyAfterEOSE(l Late) bool {
	for _, in := range l.Info {
		if in.AfterEOSE {
			return true
		}
	}
	return l.DroppedAfterEOSE
}

// A message over MaxFrame closes the connection (status 1009): the page
// ends conn-lost saying so, with the cap and the settings that raise it,
// and later REQs on the connection fail with ErrFrameTooLarge.
func TestMessageOverMaxFrame(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &pipeRelay{onMsg: onReq(func(s relaySide, sub string) {
			big := strings.Replace(testEvent(0), `"content":""`, `"content":"`+strings.Repeat("x", 1<<20)+`"`, 1)
			_ = s.WriteMessage(gws.OpcodeText, []byte(`["EVENT","`+sub+`",`+big+`]`))
		})}
		c := pipeDial(t, p)
		defer c.Close()
		page, err := c.Req(context.Background(), []byte(`{"limit":10}`), 10, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if page.End != EndConnLost || !strings.Contains(page.Reason, "over the largest accepted (1048576 bytes)") || !strings.Contains(page.Reason, "--max-frame") {
			t.Fatalf("page ended %v: %q", page.End, page.Reason)
		}
		if _, err := c.Req(context.Background(), []byte(`{"limit":10}`), 10, 5*time.Second); !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("a REQ after the close: %v, want ErrFrameTooLarge", err)
		}
	})
}
