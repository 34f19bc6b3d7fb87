package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	truth := filepath.Join(dir, "valid.jsonl")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, outW := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-events", "50", "-faults", "2",
			"-max-limit", "20", "-truth", truth}, outW, &stderr)
		_ = outW.Close()
	}()

	url, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("no URL line: %v (stderr %s)", err, stderr.String())
	}
	url = strings.TrimSpace(url)
	if !strings.HasPrefix(url, "ws://127.0.0.1:") {
		t.Fatalf("first line %q is not the relay URL", url)
	}
	req, _ := http.NewRequest(http.MethodGet, "http"+strings.TrimPrefix(url, "ws"), nil)
	req.Header.Set("Accept", "application/nostr+json")
	tr := &http.Transport{}
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Limitation struct {
			MaxLimit int `json:"max_limit"`
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	tr.CloseIdleConnections()
	if err != nil || doc.Limitation.MaxLimit != 20 {
		t.Fatalf("NIP-11: %+v, %v", doc, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not stop on cancel")
	}
	lines, _ := os.ReadFile(truth)
	// 50 events plus 2 lookalikes are valid.
	if n := bytes.Count(lines, []byte{'\n'}); n != 52 {
		t.Fatalf("truth has %d lines, want 52", n)
	}
	if !strings.Contains(stderr.String(), `"Conns":0`) {
		t.Fatalf("stats missing from stderr: %s", stderr.String())
	}
}

func TestRunBadFlags(t *testing.T) {
	var stderr bytes.Buffer
	for _, args := range [][]string{{"-drop-every", "-1", "-listen", "127.0.0.1:0", "-events", "1"}, {"extra"}, {"-events", "-5"}} {
		if err := run(context.Background(), args, io.Discard, &stderr); err == nil {
			t.Errorf("run(%q) succeeded", args)
		}
	}
}
