package daemon

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

func TestWatchdogSecWarning(t *testing.T) {
	for _, tc := range []struct {
		name              string
		interval, timeout time.Duration
		watchdogSec       time.Duration
		want              []string // "" cases: no warning
	}{
		{"systemd's watchdog off", 15 * time.Second, 10 * time.Second, 0, nil},
		{"the shipped unit and defaults: 26s gap, 2min", 15 * time.Second, 10 * time.Second, 2 * time.Minute, nil},
		{"exactly half", 19 * time.Second, 10 * time.Second, time.Minute, nil},
		{"over half: warned with both values", 20 * time.Second, 10 * time.Second, time.Minute,
			[]string{"WatchdogSec (test) is 1m0s", "up to 31s apart", "watchdog.interval 20s", "engine.request_timeout 10s",
				"systemd advises a ping every half", "at least 1m2s"}},
		{"the request timeout alone pushes it over", 5 * time.Second, 30 * time.Second, time.Minute,
			[]string{"engine.request_timeout 30s", "up to 36s apart"}},
		{"longer than all of it: systemd kills a healthy vigil", time.Minute, 10 * time.Second, time.Minute,
			[]string{"up to 1m11s apart", "systemd will kill vigil"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := loadTestConfig(t)
			cfg.Watchdog.Interval, cfg.Engine.RequestTimeout = tc.interval, tc.timeout
			got := watchdogSecWarning(cfg, tc.watchdogSec, "WatchdogSec (test)")
			if len(tc.want) == 0 {
				if got != "" {
					t.Fatalf("unexpected warning: %s", got)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("warning lacks %q: %s", w, got)
				}
			}
		})
	}
}

// The start-up check reads WatchdogSec from the environment systemd sets
// ($WATCHDOG_USEC, for the process $WATCHDOG_PID names).
func TestStartupWatchdogWarningReadsSystemdsEnvironment(t *testing.T) {
	me := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		name      string
		usec, pid string
		want      string // "": no warning
	}{
		{"not under systemd's watchdog", "", "", ""},
		{"WatchdogSec=2min: fine", "120000000", me, ""},
		// The defaults: a 5 s interval plus a 10 s request timeout.
		{"WatchdogSec=30s: too short for a 16s gap", "30000000", me, "WatchdogSec (from $WATCHDOG_USEC) is 30s"},
		{"no WATCHDOG_PID: ours", "30000000", "", "is 30s"},
		{"another process's watchdog: not ours to check", "30000000", "1", ""},
		{"garbage", "soon", me, "WATCHDOG_USEC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("WATCHDOG_USEC", tc.usec)
			t.Setenv("WATCHDOG_PID", tc.pid)
			if tc.usec == "" {
				os.Unsetenv("WATCHDOG_USEC")
			}
			got := startupWatchdogWarning(loadTestConfig(t))
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// vigil run says it at start, before anything else can fail.
func TestRunWarnsAtStartWhenWatchdogSecIsTooShort(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	t.Setenv("WATCHDOG_USEC", "4000000") // the test config's cycle: 200ms + 1s + 1s > 2s
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	// A taken status port makes vigil exit right after the check.
	yml := replaceListen(testinfra.DaemonConfig(t, "http://"+testinfra.FreeAddr(t)), "status", taken.Addr().String())
	_, stderr := runVigil(t, yml, 10*time.Second)
	if !strings.Contains(stderr, "WatchdogSec (from $WATCHDOG_USEC) is 4s") || !strings.Contains(stderr, "watchdog.interval") {
		t.Fatalf("no WatchdogSec warning at start:\n%s", stderr)
	}
}

func TestParseTimespan(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"2min", 2 * time.Minute, false},
		{"90", 90 * time.Second, false},
		{"1min 30s", 90 * time.Second, false},
		{"1min30s", 90 * time.Second, false},
		{"500ms", 500 * time.Millisecond, false},
		{"1h", time.Hour, false},
		{"2.5s", 2500 * time.Millisecond, false},
		{"0", 0, false},
		{"infinity", 0, false},
		{"", 0, false},
		{"soon", 0, true},
		{"3 fortnights", 0, true},
	} {
		got, err := parseTimespan(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseTimespan(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

// The notifications vigil sends besides the loop's (which
// TestSystemdNotificationsComeFromTheLoop reads): a reload carries
// MONOTONIC_USEC, and a status line never starts a new assignment.
func TestReloadAndStatusNotifications(t *testing.T) {
	conn := notifySocket(t)
	read := func() string {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 4096)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		return string(buf[:n])
	}
	notifyReloading()
	if got := read(); !strings.HasPrefix(got, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Errorf("reload sent %q", got)
	}
	notifyStatus("HUNG: no progress\nfor 3m")
	if got := read(); got != "STATUS=HUNG: no progress for 3m" {
		t.Errorf("status sent %q", got)
	}
}
