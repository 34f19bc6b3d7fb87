package sdnotify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// listen opens a unixgram socket like systemd's and points NOTIFY_SOCKET
// at it.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", name)
	return conn
}

func recv(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestMessages(t *testing.T) {
	for _, tc := range []struct {
		name string
		send func() error
		want string
	}{
		{"Ready", Ready, "READY=1"},
		{"Stopping", Stopping, "STOPPING=1"},
		{"Watchdog", Watchdog, "WATCHDOG=1"},
		{"Status", func() error { return Status("archiving 3 relays\n2 paused") }, "STATUS=archiving 3 relays 2 paused"},
		{"Notify", func() error { return Notify("EXTEND_TIMEOUT_USEC=5000000") }, "EXTEND_TIMEOUT_USEC=5000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := listen(t, filepath.Join(t.TempDir(), "notify"))
			if err := tc.send(); err != nil {
				t.Fatal(err)
			}
			if got := recv(t, conn); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// systemd usually hands out an abstract socket ("@/org/freedesktop/...").
func TestAbstractSocket(t *testing.T) {
	conn := listen(t, fmt.Sprintf("@archiver-sdnotify-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := Ready(); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, conn); got != "READY=1" {
		t.Errorf("got %q", got)
	}
}

func TestUnset(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	for _, f := range []func() error{Ready, Stopping, Watchdog, func() error { return Status("x") }} {
		if err := f(); err != nil {
			t.Errorf("without NOTIFY_SOCKET: %v", err)
		}
	}
}

func TestErrors(t *testing.T) {
	for _, name := range []string{
		"vsock:2:1234", // not a unix socket
		filepath.Join(t.TempDir(), "nobody-listens-here"), // no such socket
	} {
		t.Setenv("NOTIFY_SOCKET", name)
		if err := Ready(); err == nil {
			t.Errorf("NOTIFY_SOCKET=%s: no error", name)
		}
	}
}

func TestWatchdogInterval(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		usec, pid string
		want      time.Duration
		ok        bool
	}{
		{"", "", 0, false},
		{"60000000", "", 60 * time.Second, true},
		{"60000000", self, 60 * time.Second, true},
		{"60000000", "1", 0, false}, // meant for another process
		{"0", "", 0, false},
		{"-5", "", 0, false},
		{"soon", "", 0, false},
		{"18446744073709551615", "", 0, false}, // USEC_INFINITY
		{"9300000000000000", "", 0, false},     // overflows time.Duration
	} {
		t.Setenv("WATCHDOG_USEC", tc.usec)
		t.Setenv("WATCHDOG_PID", tc.pid)
		if got, ok := WatchdogInterval(); got != tc.want || ok != tc.ok {
			t.Errorf("WATCHDOG_USEC=%q WATCHDOG_PID=%q: got %v, %v; want %v, %v", tc.usec, tc.pid, got, ok, tc.want, tc.ok)
		}
	}
}
