package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Notify sends one notification (newline-separated KEY=VALUE lines, e.g.
// "READY=1") to the socket named by $NOTIFY_SOCKET. It reports false, and
// does nothing, when the variable is unset: vigil is not running under
// systemd Type=notify. A name starting with '@' is an abstract socket; the
// runtime maps '@' to the leading NUL byte the kernel expects.
//
// The environment is read on every call rather than once, so a test can
// point it at its own socket with t.Setenv.
func Notify(state string) (bool, error) {
	socket := os.Getenv("NOTIFY_SOCKET")
	if socket == "" {
		return false, nil
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return false, fmt.Errorf("sdnotify: dial %s: %w", socket, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return false, fmt.Errorf("sdnotify: send %q to %s: %w", firstLine(state), socket, err)
	}
	return true, nil
}

// Ready tells systemd that vigil has started (Type=notify): units ordered
// after vigil start now, and systemctl start returns.
func Ready() error { return send("READY=1") }

// Watchdog is the keep-alive ping for WatchdogSec=. Send it from the loop
// whose wedging should get vigil restarted, not from a timer of its own,
// or a wedged vigil would keep pinging.
func Watchdog() error { return send("WATCHDOG=1") }

// Stopping tells systemd that vigil is shutting down on purpose.
func Stopping() error { return send("STOPPING=1") }

// Reloading tells systemd that vigil is reloading its configuration; send
// Ready once the reload is done. MONOTONIC_USEC is included where the
// monotonic clock can be read, as Type=notify-reload units require it.
func Reloading() error {
	msg := "RELOADING=1"
	if usec := monotonicUsec(); usec > 0 {
		msg += "\nMONOTONIC_USEC=" + strconv.FormatUint(usec, 10)
	}
	return send(msg)
}

// Status sets the one-line status shown by systemctl status. Newlines
// would start a new KEY=VALUE assignment, so they become spaces.
func Status(text string) error {
	return send("STATUS=" + strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(text))
}

// WatchdogInterval is the WatchdogSec= systemd expects pings within, from
// $WATCHDOG_USEC. It reports false when the watchdog is off, or when
// $WATCHDOG_PID names another process (the variable was inherited, and the
// pings are not ours to send). Ping at half the interval or more often.
func WatchdogInterval() (time.Duration, bool) {
	usecText := os.Getenv("WATCHDOG_USEC")
	if usecText == "" {
		return 0, false
	}
	usec, err := strconv.ParseUint(usecText, 10, 63)
	if err != nil || usec == 0 {
		return 0, false
	}
	if pidText := os.Getenv("WATCHDOG_PID"); pidText != "" {
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid != os.Getpid() {
			return 0, false
		}
	}
	return time.Duration(usec) * time.Microsecond, true
}

func send(state string) error {
	_, err := Notify(state)
	return err
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
