package frame

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nostr-archiver/archiver/event"
)

// realisticFrame builds an EVENT frame of about size bytes the way relays
// send them: NIP-01 key order, e/p/t tags, and content with the escapes
// and non-ASCII text real notes carry.
func realisticFrame(size int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	fill := func(b []byte) {
		for i := range b {
			b[i] = byte(r.Uint32())
		}
	}
	hex32 := func() string {
		var b [32]byte
		fill(b[:])
		return fmt.Sprintf("%x", b)
	}
	e := &event.Event{
		CreatedAt: 1700000000 + r.Int64N(1e7),
		Kind:      1,
		Tags: [][]string{
			{"e", hex32(), "wss://relay.example.com", "root"},
			{"p", hex32()},
			{"t", "nostr"},
		},
	}
	fill(e.ID[:])
	fill(e.PubKey[:])
	fill(e.Sig[:])
	words := []string{"gm", "\"quoted\"", "line\nbreak", `back\slash`, "café", "😀", "</script>", "https://example.com/a?b=c", "tab\there"}
	var content strings.Builder
	base := len(event.AppendJSON(nil, e)) + len(`["EVENT","sub:12",]`)
	for base+len(event.AppendString(nil, content.String())) < size {
		content.WriteString(words[r.IntN(len(words))])
		content.WriteByte(' ')
	}
	e.Content = content.String()
	frame := append([]byte(`["EVENT","sub:12",`), event.AppendJSON(nil, e)...)
	return append(frame, ']')
}

// jsonDecode is the baseline: what a client does with encoding/json.
func jsonDecode(frame []byte) error {
	var arr []json.RawMessage
	if err := json.Unmarshal(frame, &arr); err != nil {
		return err
	}
	if len(arr) != 3 {
		return fmt.Errorf("%d elements", len(arr))
	}
	var label, sub string
	var ev struct {
		ID        string     `json:"id"`
		PubKey    string     `json:"pubkey"`
		CreatedAt int64      `json:"created_at"`
		Kind      int        `json:"kind"`
		Tags      [][]string `json:"tags"`
		Content   string     `json:"content"`
		Sig       string     `json:"sig"`
	}
	if err := json.Unmarshal(arr[0], &label); err != nil {
		return err
	}
	if err := json.Unmarshal(arr[1], &sub); err != nil {
		return err
	}
	return json.Unmarshal(arr[2], &ev)
}

func BenchmarkParse(b *testing.B) {
	for _, size := range []int{600, 4096} {
		frame := realisticFrame(size, 1)
		for _, impl := range []struct {
			name  string
			parse func([]byte) error
		}{
			{"scan", func(f []byte) error { _, err := Parse(f); return err }},
			{"encoding_json", jsonDecode},
		} {
			b.Run(fmt.Sprintf("%s/%dB", impl.name, len(frame)), func(b *testing.B) {
				if err := impl.parse(frame); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(frame)))
				b.ReportAllocs()
				for b.Loop() {
					if err := impl.parse(frame); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
			})
		}
	}
}

func TestRealisticFrame(t *testing.T) {
	for _, size := range []int{600, 4096} {
		frame := realisticFrame(size, 2)
		if len(frame) < size || len(frame) > size+64 {
			t.Errorf("realisticFrame(%d) is %d bytes", size, len(frame))
		}
		m, ok := scanEvent(frame)
		if !ok {
			t.Fatalf("scanner gave up on %s", frame)
		}
		e, err := event.Parse(m.Raw)
		if err != nil {
			t.Fatal(err)
		}
		if e.ID != m.ID || e.CreatedAt != m.CreatedAt || m.SubID != "sub:12" {
			t.Errorf("scan disagrees with event.Parse: %+v", m)
		}
	}
}

// BenchmarkParseArticle scans a long-form event (NIP-23): paragraphs of
// plain text, a line break every 80 bytes, where runs between escapes are
// long (realisticFrame's words put an escape every ~30 bytes).
func BenchmarkParseArticle(b *testing.B) {
	var content strings.Builder
	for content.Len() < 16<<10 {
		content.WriteString(strings.Repeat("plain words of an article, ", 3)[:79])
		content.WriteByte('\n')
	}
	e := &event.Event{CreatedAt: 1700000000, Kind: 30023, Content: content.String(), Tags: [][]string{{"d", "an-article"}, {"title", "An article"}}}
	frame := append([]byte(`["EVENT","sub:12",`), event.AppendJSON(nil, e)...)
	frame = append(frame, ']')
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, err := Parse(frame); err != nil {
			b.Fatal(err)
		}
	}
}
