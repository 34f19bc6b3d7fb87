package filter

import (
	"errors"
	"strings"
	"testing"

	"github.com/nostr-archiver/archiver/event"
)

func TestParse(t *testing.T) {
	pk := strings.Repeat("ab", 32)
	for _, c := range []struct {
		in    string
		n     int    // filters parsed
		err   string // substring of the error, "" for none
		empty bool   // the (first) filter matches nothing
	}{
		{in: `{}`, n: 1},
		{in: ` {"kinds":[1,0,65535],"limit":10} `, n: 1},
		{in: `[{"kinds":[1]},{"authors":["` + pk + `"]}]`, n: 2},
		{in: `{"#e":["x"],"#T":["y"],"since":1,"until":2}`, n: 1},
		{in: `{"authors":[]}`, n: 1, empty: true},
		{in: `{"#p":[]}`, n: 1, empty: true},
		{in: `{"limit":0}`, n: 1, empty: true},
		{in: `{"since":5,"until":4}`, n: 1, empty: true},
		{in: ``, err: "not a JSON object"},
		{in: `[]`, err: "empty array"},
		{in: `[{"kinds":[1]},3]`, err: "filter 1"},
		{in: `{"kinds":[1],}`, err: "invalid"},
		{in: `{"kind":1}`, err: "unknown field"},
		{in: `{"search":"x"}`, err: "unknown field"},
		{in: `{"#":["x"]}`, err: "unknown field"},
		{in: `{"#1":["x"]}`, err: "unknown field"},
		{in: `{"#e":"x"}`, err: "not a list of strings"},
		{in: `{"#e":null}`, err: "null"},
		{in: `{"ids":["abc"]}`, err: "not 64 lowercase hex"},
		{in: `{"ids":["` + strings.ToUpper(pk) + `"]}`, err: "not 64 lowercase hex"},
		{in: `{"kinds":[-1]}`, err: "outside"},
		{in: `{"kinds":[1.5]}`, err: "not an integer"},
		{in: `{"kinds":[65536]}`, err: "outside"},
		{in: `{"since":-1}`, err: "outside"},
		{in: `{"until":1e3}`, err: "not an integer"},
		{in: `{"limit":"5"}`, err: "not an integer"},
	} {
		fs, err := Parse([]byte(c.in))
		switch {
		case c.err != "":
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Parse(%s) = %v, want an ErrInvalid saying %q", c.in, err, c.err)
			}
		case err != nil:
			t.Errorf("Parse(%s): %v", c.in, err)
		case len(fs) != c.n:
			t.Errorf("Parse(%s): %d filters, want %d", c.in, len(fs), c.n)
		case fs[0].Empty() != c.empty:
			t.Errorf("Parse(%s).Empty() = %v", c.in, !c.empty)
		}
	}
}

func TestMatch(t *testing.T) {
	e := &event.Event{CreatedAt: 100, Kind: 1, Tags: [][]string{{"e", "x"}, {"t"}, {"tt", "y"}, {"T", "z", "more"}}}
	e.PubKey[0], e.ID[0] = 1, 2
	pk := "01" + strings.Repeat("00", 31)
	id := "02" + strings.Repeat("00", 31)
	for _, c := range []struct {
		f    string
		want bool
	}{
		{`{}`, true},
		{`{"ids":["` + id + `"]}`, true},
		{`{"ids":["` + pk + `"]}`, false},
		{`{"authors":["` + pk + `"],"kinds":[0,1]}`, true},
		{`{"kinds":[0]}`, false},
		{`{"since":100,"until":100}`, true},
		{`{"since":101}`, false},
		{`{"until":99}`, false},
		{`{"#e":["w","x"]}`, true},
		{`{"#e":["x"],"#T":["z"]}`, true},
		{`{"#e":["x"],"#T":["more"]}`, false}, // only the first value counts
		{`{"#t":[""]}`, false},                // a tag without a value matches nothing
		{`{"#y":["y"]}`, false},
	} {
		fs, err := Parse([]byte(c.f))
		if err != nil {
			t.Fatal(err)
		}
		if got := fs[0].Match(e); got != c.want {
			t.Errorf("%s matches: %v, want %v", c.f, got, c.want)
		}
	}
}

// FuzzParse: any bytes give filters or an ErrInvalid, never a panic, and
// a parsed filter's fields are in range.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{}`, `[{"kinds":[1]},{"#e":["x"]}]`, `{"ids":["` + strings.Repeat("0", 64) + `"],"limit":3}`, `{"since":1,"until":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		fs, err := Parse(in)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error without ErrInvalid: %v", err)
			}
			return
		}
		for _, f := range fs {
			for _, k := range f.Kinds {
				if k < 0 || k > 65535 {
					t.Fatalf("kind %d", k)
				}
			}
			if f.Since < 0 || f.Until > MaxUntil || f.Limit < -1 {
				t.Fatalf("since %d until %d limit %d", f.Since, f.Until, f.Limit)
			}
		}
	})
}
