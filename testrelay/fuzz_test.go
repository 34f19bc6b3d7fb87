package testrelay

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzHandle feeds arbitrary client messages through the reader's handling
// and the writer's answers, on a store with a wall and duplicates. Every
// frame written must be a JSON array, or a Frame item's bytes.
func FuzzHandle(f *testing.F) {
	for _, s := range []string{
		`["REQ","s",{"since":100,"until":120,"limit":5}]`,
		`["REQ","s",{"kinds":[1],"authors":["` + testAuthors[0] + `"]},{"ids":["x"]}]`,
		`["REQ","s",{"until":-1}]`, `["REQ","s"]`, `["REQ",""]`, `["REQ",1]`,
		`["COUNT","c",{"since":110}]`, `["CLOSE","s"]`, `["AUTH",{"id":"00"}]`,
		`["EVENT",{"id":"ab"}]`, `[]`, `{}`, `["REQ","s",{"limit":-1}]`, `["REQ","s",{"limit":1e3}]`,
	} {
		f.Add([]byte(s))
	}
	items := synth(50, func(i int) int64 { return 100 + int64(i/10) })
	items = append(items, items[3], Item{Raw: []byte(`["EVENT","` + SubPlaceholder + `"`), CreatedAt: 105, Frame: true})
	r := &Relay{store: newStore(), buckets: map[string]*bucket{}}
	r.store.add(items)
	opts := Options{ExtraOutOfRange: 2, SupportCount: true, MaxSubsPerConn: 3, RateLimit: 1e9}.withDefaults()
	r.opts.Store(&opts)
	sink := &captureConn{}

	f.Fuzz(func(t *testing.T, data []byte) {
		c := &conn{r: r, wire: &wireConn{Conn: sink}, jobs: make(chan job, 16), stop: make(chan struct{}), subs: map[string]*sub{}}
		c.handle(data, r.options())
		for len(c.jobs) > 0 {
			sink.buf.Reset()
			if err := c.do(<-c.jobs); err != nil {
				t.Fatal(err)
			}
			for _, frame := range splitFrames(t, sink.buf.Bytes()) {
				var a []json.RawMessage
				if json.Unmarshal(frame, &a) != nil && !bytes.HasPrefix(frame, []byte(`["EVENT","`)) {
					t.Fatalf("answer %q to %q is not a relay message", frame, data)
				}
			}
		}
	})
}

type captureConn struct {
	discardConn
	buf bytes.Buffer
}

func (c *captureConn) Write(p []byte) (int, error) { return c.buf.Write(p) }

// splitFrames parses unmasked server frames as the relay writes them.
func splitFrames(t *testing.T, b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		if len(b) < 2 || b[0] != 0x81 {
			t.Fatalf("bad frame header % x", b[:min(len(b), 10)])
		}
		n, h := int(b[1]), 2
		switch n {
		case 126:
			n, h = int(b[2])<<8|int(b[3]), 4
		case 127:
			n, h = 0, 10
			for _, x := range b[2:10] {
				n = n<<8 | int(x)
			}
		}
		if len(b) < h+n {
			t.Fatalf("frame of %d bytes, %d left", n, len(b)-h)
		}
		out = append(out, b[h:h+n])
		b = b[h+n:]
	}
	return out
}
