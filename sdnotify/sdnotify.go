// Package sdnotify speaks systemd's notify protocol (sd_notify(3)) for a
// Type=notify service: one datagram of newline-separated VAR=value lines
// to the AF_UNIX socket named by $NOTIFY_SOCKET. Without cgo, without
// libsystemd.
//
// Every function is a no-op returning nil when NOTIFY_SOCKET is unset, so
// the daemon calls them unconditionally and behaves the same outside
// systemd.
package sdnotify

import (
	"errors"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Notify sends state, one or more newline-separated assignments such as
// "READY=1" or "EXTEND_TIMEOUT_USEC=30000000", to $NOTIFY_SOCKET. The
// socket is a path, or an abstract socket written with a leading '@'.
func Notify(state string) error {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return nil
	}
	if name[0] != '/' && name[0] != '@' {
		// systemd 253+ may also pass "vsock:CID:PORT" (for VMs); a
		// service on the host never gets one.
		return errors.New("sdnotify: unsupported NOTIFY_SOCKET " + strconv.Quote(name))
	}
	// The net package maps a leading '@' to the abstract namespace.
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return err
	}
	_, err = conn.Write([]byte(state))
	return errors.Join(err, conn.Close())
}

// Ready tells systemd that startup is finished: a Type=notify unit becomes
// active and `systemctl start` returns.
func Ready() error { return Notify("READY=1") }

// Stopping tells systemd that the service is shutting down.
func Stopping() error { return Notify("STOPPING=1") }

// Watchdog pings the watchdog (WatchdogSec=). Call it from the loop whose
// progress it vouches for, at least every WatchdogInterval()/2.
func Watchdog() error { return Notify("WATCHDOG=1") }

// Status sets the one-line status shown by `systemctl status`. Newlines
// in s would end the assignment, so they become spaces.
func Status(s string) error {
	return Notify("STATUS=" + strings.ReplaceAll(s, "\n", " "))
}

// WatchdogInterval returns the watchdog timeout systemd set for this
// process (WATCHDOG_USEC, if WATCHDOG_PID is unset or this process), and
// false when there is none. Ping at half of it.
func WatchdogInterval() (time.Duration, bool) {
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0, false
	}
	usec, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || usec <= 0 || usec > math.MaxInt64/int64(time.Microsecond) {
		return 0, false
	}
	return time.Duration(usec) * time.Microsecond, true
}
