package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/internal/haproxystat"
)

// Command sends one runtime API command to a HAProxy started by
// StartHAProxyText and returns its answer.
func (h *HAProxy) Command(ctx context.Context, cmd string) (string, error) {
	if h.Socket == "" {
		return "", errors.New("haproxy: no runtime API socket")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", h.Socket)
	if err != nil {
		return "", fmt.Errorf("haproxy: runtime API %s: %w", h.Socket, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := io.WriteString(conn, cmd+"\n"); err != nil {
		return "", fmt.Errorf("haproxy: runtime API %q: %w", cmd, err)
	}
	out, err := io.ReadAll(conn)
	if err != nil {
		return "", fmt.Errorf("haproxy: runtime API %q: %w", cmd, err)
	}
	return string(out), nil
}

// ServerStats is "show stat" for backend's servers: server name → column
// (status, stot, chkfail, chkdown, downtime, ...) → value.
func (h *HAProxy) ServerStats(ctx context.Context, backend string) (map[string]map[string]string, error) {
	out, err := h.Command(ctx, "show stat")
	if err != nil {
		return nil, err
	}
	return haproxystat.Parse(out, backend)
}

// WaitServersUp waits up to timeout until every server of backend reports
// status UP.
func (h *HAProxy) WaitServersUp(ctx context.Context, backend string, servers []string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := h.ServerStats(ctx, backend)
		down := []string{}
		for _, s := range servers {
			if err != nil || st[s]["status"] != "UP" {
				down = append(down, fmt.Sprintf("%s=%q", s, st[s]["status"]))
			}
		}
		if len(down) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("haproxy: %s not UP after %v: %s (%v)", backend, timeout, strings.Join(down, " "), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
