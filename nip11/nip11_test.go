package nip11

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestFetch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		status   int
		body     string
		wantErr  error
		maxLimit int
	}{
		{"strfry", 200, `{"name":"x","supported_nips":[1,11,45],"limitation":{"max_message_length":131072,"max_subscriptions":200,"max_limit":500},"negentropy":1}`, nil, 500},
		{"no limitation", 200, `{"name":"x"}`, nil, 0},
		{"html", 200, `<html>hi</html>`, ErrNoDocument, 0},
		{"404", 404, `not found`, ErrNoDocument, 0},
		{"wrong types", 200, `{"limitation":{"max_limit":"lots"}}`, ErrNoDocument, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Accept") != "application/nostr+json" {
					t.Errorf("Accept = %q", r.Header.Get("Accept"))
				}
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			doc, err := Fetch(context.Background(), srv.Client(), "ws"+strings.TrimPrefix(srv.URL, "http"))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err == nil && doc.Limitation.MaxLimit != tc.maxLimit {
				t.Fatalf("max_limit = %d", doc.Limitation.MaxLimit)
			}
			if tc.name == "strfry" && !doc.Supports(45) {
				t.Fatal("NIP-45 not listed")
			}
		})
	}
}

func TestHTTPURL(t *testing.T) {
	for in, want := range map[string]string{
		"wss://relay.example.com":      "https://relay.example.com",
		"ws://127.0.0.1:7447/path?x=1": "http://127.0.0.1:7447/path?x=1",
	} {
		if got, err := HTTPURL(in); err != nil || got != want {
			t.Errorf("HTTPURL(%s) = %s, %v", in, got, err)
		}
	}
	if _, err := HTTPURL("ftp://x"); err == nil {
		t.Error("ftp accepted")
	}
}
