package crawl

import "testing"

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		text   string
		act    action
		prefix string
	}{
		{"rate-limited: slow down", actBackoff, "rate-limited"},
		{"ERROR: rate-limited: too fast", actBackoff, "rate-limited"},
		{"ERROR: too many concurrent REQs", actBackoff, "error"},
		{"auth-required: we only serve members", actAuth, "auth-required"},
		{"ERROR: auth-required: requested filter requires authentication", actAuth, "auth-required"},
		{"restricted: not allowed", actGiveUp, "restricted"},
		{"blocked: filters must specify at least one kind", actGiveUp, "blocked"},
		{"ERROR: bad req: unknown field", actRetry, "error"},
		{"invalid: \"[2].limit\" must be less than or equal to 5000", actRetry, "invalid"},
		{"Subscription rejected: Too many subscriptions", actBackoff, ""},
		{"something odd happened", actRetry, ""},
	} {
		act, p := classify(tc.text)
		if act != tc.act || p != tc.prefix {
			t.Errorf("classify(%q) = %v,%q; want %v,%q", tc.text, act, p, tc.act, tc.prefix)
		}
	}
}
