package relayconn

import "testing"

// A bad frame's quarantine key is the frame without its subscription id,
// wherever the relay put it, so that a resend on another subscription is
// the same copy.
func TestBlankSubID(t *testing.T) {
	for _, tc := range []struct {
		frame  string
		issued uint64
		want   string // "" means nil: the frame is its own key
	}{
		{`["EVENT","a1b",{"id":"x"`, 100, `["EVENT","",{"id":"x"`},
		{`{"EVENT":"a1"}`, 1, `{"EVENT":""}`},
		{`["EVENT","t9"]`, 9, `["EVENT",""]`},
		{`["EVENT","a"]`, 9, ""},    // a prefix alone is no id
		{`["EVENT","a10"]`, 35, ""}, // "a10" is 36: not issued yet
		{`["EVENT","b1"]`, 9, ""},   // not one of our prefixes
		{`["EVENT","a0"]`, 9, ""},   // the counter starts at 1
		{`["EVENT","a1-x"]`, 9, ""}, // not base 36
		{`["EVENT",42,{"content":"a2"}]`, 9, `["EVENT",42,{"content":""}]`},
		{`["EVENT","a3","a2"]`, 9, `["EVENT","","a2"]`}, // the first only
		{`["EVENT","unclosed`, 9, ""},
		{`this is not JSON`, 9, ""},
		{``, 9, ""},
	} {
		got := blankSubID([]byte(tc.frame), tc.issued)
		if (got == nil) != (tc.want == "") || string(got) != tc.want {
			t.Errorf("blankSubID(%s, %d) = %q, want %q", tc.frame, tc.issued, got, tc.want)
		}
	}
}

func FuzzBlankSubID(f *testing.F) {
	f.Add([]byte(`["EVENT","a1b",{"id":"x"`), uint64(500))
	f.Add([]byte(`{"EVENT":"t1"}`), uint64(1))
	f.Fuzz(func(t *testing.T, frame []byte, issued uint64) {
		got := blankSubID(frame, issued)
		if got == nil {
			return
		}
		// Exactly one quoted id was removed: what is left is a prefix and
		// a suffix of the frame.
		n := len(frame) - len(got)
		if n < 2 {
			t.Fatalf("blanked %d bytes of %q", n, frame)
		}
		for i := range got {
			if got[i] != frame[i] {
				if string(got[i:]) != string(frame[i+n:]) {
					t.Fatalf("%q -> %q is not one cut", frame, got)
				}
				return
			}
		}
	})
}
