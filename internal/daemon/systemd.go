package daemon

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/coreos/go-systemd/v22/activation"
	sd "github.com/coreos/go-systemd/v22/daemon"
	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/configs"
)

// vigil sends systemd's WATCHDOG=1 at the end of each watchdog cycle (see
// onCycle), so the heartbeat is only as regular as the cycle. Cycles start
// every watchdog.interval, and a cycle's sampling waits for the engine's
// three probes, each bounded by engine.request_timeout with a second of
// slack (watchdog.sampleOnce). Between a quick cycle and a slow next one,
// two pings are up to interval + request_timeout + 1s apart. systemd's
// advice is to ping every half of WatchdogSec; past all of it, systemd
// kills a healthy vigil.

// notify tells systemd one state change ("READY=1"...). Outside systemd
// ($NOTIFY_SOCKET unset) it does nothing. A failed send is not reported:
// there is nobody else to tell, and a missed WATCHDOG=1 costs at most a
// restart by systemd.
func notify(state string) { _, _ = sd.SdNotify(false, state) }

// notifyStatus sets the line systemctl status shows. A newline would
// start a new KEY=VALUE assignment, so newlines become spaces.
func notifyStatus(text string) {
	notify("STATUS=" + strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(text))
}

// notifyReloading starts a reload (SIGHUP); READY=1 ends it.
// MONOTONIC_USEC is sent with it where the clock can be read, as
// Type=notify-reload units require.
func notifyReloading() { notify(sd.SdNotifyReloading + "\n" + sd.SdNotifyMonotonicUsec()) }

// heartbeatGap is the longest vigil may go between two WATCHDOG=1 while
// its loop is healthy.
func heartbeatGap(cfg *configs.Config) time.Duration {
	return cfg.Watchdog.Interval + cfg.Engine.RequestTimeout + time.Second
}

// watchdogSecWarning says, naming both values, when the heartbeat gap is
// longer than half of watchdogSec ("" when it is not, or when the systemd
// watchdog is off). source names where watchdogSec came from.
func watchdogSecWarning(cfg *configs.Config, watchdogSec time.Duration, source string) string {
	if watchdogSec <= 0 {
		return ""
	}
	gap := heartbeatGap(cfg)
	if gap <= watchdogSec/2 {
		return ""
	}
	consequence := "systemd advises a ping every half of it; a slow engine may get vigil restarted by its own watchdog"
	if gap >= watchdogSec {
		consequence = "systemd will kill vigil whenever a cycle runs long, even with its loop healthy"
	}
	return fmt.Sprintf("%s is %s, but vigil pings systemd once per watchdog cycle, up to %s apart "+
		"(watchdog.interval %s + engine.request_timeout %s + 1s): %s; set WatchdogSec to at least %s or shorten watchdog.interval",
		source, watchdogSec, gap, cfg.Watchdog.Interval, cfg.Engine.RequestTimeout, consequence, 2*gap)
}

// startupWatchdogWarning checks the heartbeat against the WatchdogSec
// systemd gave this process ($WATCHDOG_USEC, when $WATCHDOG_PID is ours).
func startupWatchdogWarning(cfg *configs.Config) string {
	wd, err := sd.SdWatchdogEnabled(false)
	if err != nil {
		return fmt.Sprintf("systemd watchdog: %v; vigil cannot check its cycle against WatchdogSec", err)
	}
	return watchdogSecWarning(cfg, wd, "WatchdogSec (from $WATCHDOG_USEC)")
}

// parseTimespan reads a systemd time span ("2min", "90", "1min 30s",
// "500ms"): a bare number is seconds; "infinity" and "0" turn the
// watchdog off (0).
func parseTimespan(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "infinity" {
		return 0, nil
	}
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Duration(n * float64(time.Second)), nil
	}
	units := map[string]time.Duration{
		"us": time.Microsecond, "usec": time.Microsecond,
		"ms": time.Millisecond, "msec": time.Millisecond,
		"s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second,
		"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
		"h": time.Hour, "hr": time.Hour, "hour": time.Hour, "hours": time.Hour,
		"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
		"w": 7 * 24 * time.Hour, "week": 7 * 24 * time.Hour, "weeks": 7 * 24 * time.Hour,
	}
	var total time.Duration
	rest := s
	for rest = strings.TrimSpace(rest); rest != ""; rest = strings.TrimSpace(rest) {
		i := strings.IndexFunc(rest, func(r rune) bool { return !unicode.IsDigit(r) && r != '.' })
		if i <= 0 {
			return 0, fmt.Errorf("time span %q: expected a number and a unit (e.g. 2min)", s)
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("time span %q: %w", s, err)
		}
		rest = strings.TrimLeft(rest[i:], " ")
		j := strings.IndexFunc(rest, func(r rune) bool { return !unicode.IsLetter(r) })
		if j < 0 {
			j = len(rest)
		}
		unit, ok := units[rest[:j]]
		if !ok {
			return 0, fmt.Errorf("time span %q: unknown unit %q", s, rest[:j])
		}
		total += time.Duration(n * float64(unit))
		rest = rest[j:]
	}
	return total, nil
}

// socketNames are the listening sockets vigil takes from systemd socket
// activation, by FileDescriptorName= (systemd/vigil.socket).
var socketNames = []string{"admission", "status"}

// systemdSockets takes the sockets systemd passed (none outside socket
// activation). A socket with another name, or two with one name, is an
// error: vigil would otherwise serve on a socket nobody meant.
func systemdSockets(log *logrus.Entry) (map[string]net.Listener, error) {
	byName, err := activation.ListenersWithNames()
	if err != nil {
		return nil, fmt.Errorf("systemd socket activation: %w", err)
	}
	out := map[string]net.Listener{}
	for name, lns := range byName {
		if !slices.Contains(socketNames, name) || len(lns) != 1 {
			return nil, fmt.Errorf("systemd socket activation: %d socket(s) named %q; vigil takes one each of %s (FileDescriptorName= in vigil.socket)",
				len(lns), name, strings.Join(socketNames, ", "))
		}
		out[name] = lns[0]
		log.WithFields(logrus.Fields{"socket": name, "listen": lns[0].Addr().String()}).Info("vigil: serving on a socket systemd holds: it outlives this process")
	}
	return out, nil
}
