package sdnotify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// listen opens a datagram socket standing in for systemd's. Unix socket
// paths are limited to ~108 bytes and t.TempDir() paths carry the test
// name, so the directory is made short by hand.
func listen(t *testing.T) (*net.UnixConn, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "n.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, path
}

func receive(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no datagram received: %v", err)
	}
	return string(buf[:n])
}

func TestNotificationsReachSystemdAsExactDatagrams(t *testing.T) {
	conn, path := listen(t)
	t.Setenv("NOTIFY_SOCKET", path)
	cases := []struct {
		name string
		send func() error
		want string
	}{
		{"vigil tells systemd it is ready", Ready, "READY=1"},
		{"the cycle loop pings the watchdog", Watchdog, "WATCHDOG=1"},
		{"a clean shutdown says it is stopping", Stopping, "STOPPING=1"},
		{"a status line shows in systemctl status", func() error { return Status("watching node1: healthy") }, "STATUS=watching node1: healthy"},
		{"a status line cannot smuggle a second assignment", func() error { return Status("hung\nREADY=1") }, "STATUS=hung READY=1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.send(); err != nil {
				t.Fatal(err)
			}
			if got := receive(t, conn); got != tc.want {
				t.Fatalf("datagram = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestReloadingCarriesTheMonotonicClock(t *testing.T) {
	conn, path := listen(t)
	t.Setenv("NOTIFY_SOCKET", path)
	if err := Reloading(); err != nil {
		t.Fatal(err)
	}
	got := receive(t, conn)
	lines := strings.Split(got, "\n")
	if lines[0] != "RELOADING=1" {
		t.Fatalf("datagram = %q, want it to start with RELOADING=1", got)
	}
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "MONOTONIC_USEC=") {
		t.Fatalf("datagram = %q, want a MONOTONIC_USEC line (required by Type=notify-reload)", got)
	}
	if usec, err := strconv.ParseUint(strings.TrimPrefix(lines[1], "MONOTONIC_USEC="), 10, 64); err != nil || usec == 0 {
		t.Fatalf("MONOTONIC_USEC = %q, want a positive integer", lines[1])
	}
}

func TestAbstractSocketNamesStartWithAt(t *testing.T) {
	name := fmt.Sprintf("@vigil-sdnotify-test-%d", os.Getpid())
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Skipf("abstract sockets unavailable here: %v", err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", name)
	if err := Ready(); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, conn); got != "READY=1" {
		t.Fatalf("datagram = %q, want READY=1", got)
	}
}

func TestWithoutNotifySocketEverythingIsANoOp(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	sent, err := Notify("READY=1")
	if sent || err != nil {
		t.Fatalf("Notify without a socket = %v, %v; want false, nil", sent, err)
	}
	for _, f := range []func() error{Ready, Watchdog, Stopping, Reloading} {
		if err := f(); err != nil {
			t.Fatalf("notification without a socket failed: %v", err)
		}
	}
}

func TestAMissingSocketIsAnErrorNamingIt(t *testing.T) {
	dir, err := os.MkdirTemp("", "sd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "gone.sock")
	t.Setenv("NOTIFY_SOCKET", path)
	err = Ready()
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Ready to a missing socket = %v, want an error naming %s", err, path)
	}
}

func TestWatchdogInterval(t *testing.T) {
	me := strconv.Itoa(os.Getpid())
	cases := []struct {
		name      string
		usec, pid string
		want      time.Duration
		wantOK    bool
	}{
		{"WatchdogSec=2min arrives as microseconds", "120000000", "", 2 * time.Minute, true},
		{"the pid matches ours", "30000000", me, 30 * time.Second, true},
		{"a watchdog meant for another process is not ours to ping", "30000000", "1", 0, false},
		{"no watchdog configured", "", "", 0, false},
		{"a garbled value means no watchdog", "soon", "", 0, false},
		{"zero means no watchdog", "0", "", 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("WATCHDOG_USEC", tc.usec)
			t.Setenv("WATCHDOG_PID", tc.pid)
			got, ok := WatchdogInterval()
			if got != tc.want || ok != tc.wantOK {
				t.Fatalf("WatchdogInterval() = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
