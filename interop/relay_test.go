package interop

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// repoRoot finds the module root above the test's working directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// startNostrRelay runs interop/nostr-relay/server.js (the @nostr-relay
// packages over SQLite) on a free port and returns its ws:// URL. The
// process is stopped, and its exit checked, when the test ends.
func startNostrRelay(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "interop", "nostr-relay")
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		t.Fatalf("the relay's npm packages are not installed (%v): run .ci/install-interop.sh from the repository root", err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found (%v): install Node.js >= 20, then run .ci/install-interop.sh", err)
	}
	db := filepath.Join(t.TempDir(), "relay.db")
	// stdin stays open for the relay's life: if this test process dies
	// without its cleanup, the relay sees EOF and exits.
	cmd := exec.Command(node, "server.js", "--port", "0", "--db", db, "--exit-on-stdin-eof")
	cmd.Dir = dir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &tailBuffer{max: 64 << 10}
	out := &firstLine{line: make(chan string, 1), rest: logs}
	cmd.Stdout, cmd.Stderr = out, logs
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start relay: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		var err error
		select {
		case err = <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			err = fmt.Errorf("killed after 10s: %w", <-exited)
		}
		stdin.Close()
		if err != nil {
			t.Errorf("relay exit: %v", err)
		}
		if ps := cmd.ProcessState; ps != nil {
			t.Logf("relay process used %v user + %v system CPU", ps.UserTime().Round(time.Millisecond), ps.SystemTime().Round(time.Millisecond))
		}
		if t.Failed() {
			t.Logf("relay output (tail):\n%s", logs)
		}
	})

	select {
	case line := <-out.line:
		port, ok := strings.CutPrefix(line, "LISTENING ")
		if !ok {
			t.Fatalf("relay's first line is %q, want LISTENING <port>\n%s", line, logs)
		}
		return "ws://127.0.0.1:" + port
	case err := <-exited:
		exited <- err // for the cleanup
		t.Fatalf("relay exited before listening: %v\n%s", err, logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("relay not listening after 30s\n%s", logs)
	}
	panic("unreachable")
}

// firstLine hands the first line written to it to line and the rest of
// the stream to rest.
type firstLine struct {
	mu   sync.Mutex
	buf  []byte
	done bool
	line chan string
	rest *tailBuffer
}

func (w *firstLine) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return w.rest.Write(p)
	}
	w.buf = append(w.buf, p...)
	i := bytes.IndexByte(w.buf, '\n')
	if i < 0 {
		if len(w.buf) > 1<<10 {
			return 0, errors.New("first line too long")
		}
		return len(p), nil
	}
	w.done = true
	w.line <- string(w.buf[:i])
	_, _ = w.rest.Write(w.buf[i+1:])
	return len(p), nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b = append(b.b, p...)
	if over := len(b.b) - b.max; over > 0 {
		b.b = append(b.b[:0], b.b[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.b)
}
