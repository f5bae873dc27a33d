package balancer

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

// HAProxy drains and restores one server through HAProxy's runtime API
// (the "stats socket ... level admin" socket). Each command runs on its own
// connection, bounded by the configured timeout and the caller's context.
type HAProxy struct {
	network string // "unix" or "tcp"
	address string
	socket  string // as configured, for messages
	backend string
	server  string
	timeout time.Duration
}

// Admin state bits of "show servers state" (srv_admin_state), from
// HAProxy's include/haproxy/server-t.h. Only the forced ones (set from the
// CLI or the stats page) count: those are an operator's or vigil's hand.
const (
	adminForcedMaint = 0x01
	adminForcedDrain = 0x08
)

// ErrNotFound is wrapped by errors about a backend or server HAProxy does
// not know.
var ErrNotFound = errors.New("not found")

// NewHAProxy checks the socket address and returns a drainer for
// cfg.Backend/cfg.Server. It does not connect.
func NewHAProxy(cfg configs.HAProxy) (*HAProxy, error) {
	h := &HAProxy{socket: cfg.Socket, backend: cfg.Backend, server: cfg.Server, timeout: cfg.Timeout}
	switch s := cfg.Socket; {
	case strings.HasPrefix(s, "unix://"):
		h.network, h.address = "unix", strings.TrimPrefix(s, "unix://")
	case strings.HasPrefix(s, "tcp://"):
		h.network, h.address = "tcp", strings.TrimPrefix(s, "tcp://")
	case strings.HasPrefix(s, "/"):
		h.network, h.address = "unix", s
	default:
		return nil, fmt.Errorf("haproxy: socket must be unix:///path, /path or tcp://host:port, got %q", s)
	}
	if h.address == "" {
		return nil, fmt.Errorf("haproxy: socket %q has no address", cfg.Socket)
	}
	if h.backend == "" || h.server == "" {
		return nil, fmt.Errorf("haproxy: backend and server are required (got %q/%q)", h.backend, h.server)
	}
	if h.timeout <= 0 {
		h.timeout = 5 * time.Second
	}
	return h, nil
}

func (h *HAProxy) String() string { return "haproxy " + h.backend + "/" + h.server }

// Drain sets the server to DRAIN: no new requests, those in flight finish.
func (h *HAProxy) Drain(ctx context.Context) error {
	return h.set(ctx, "state drain")
}

// Ready sets the server back to READY.
func (h *HAProxy) Ready(ctx context.Context) error {
	return h.set(ctx, "state ready")
}

// Maint sets the server to MAINT (no traffic at all, health checks stop).
func (h *HAProxy) Maint(ctx context.Context) error {
	return h.set(ctx, "state maint")
}

// SetWeight sets the server's weight to percent of its configured weight.
func (h *HAProxy) SetWeight(ctx context.Context, percent int) error {
	if percent < 0 || percent > 100 {
		return fmt.Errorf("haproxy: set server %s/%s weight: %d%% is outside 0..100", h.backend, h.server, percent)
	}
	return h.set(ctx, "weight "+strconv.Itoa(percent)+"%")
}

// set runs "set server B/S <what>". HAProxy answers a successful set with
// an empty line; any text is an error.
func (h *HAProxy) set(ctx context.Context, what string) error {
	cmd := "set server " + h.backend + "/" + h.server + " " + what
	out, err := h.Command(ctx, cmd)
	if err != nil {
		return fmt.Errorf("haproxy: %s: %w", cmd, err)
	}
	if answer := strings.TrimSpace(out); answer != "" {
		return fmt.Errorf("haproxy: %s: %w", cmd, h.answerError(answer))
	}
	return nil
}

// answerError turns a runtime API error answer into an error that names
// what was wrong.
func (h *HAProxy) answerError(answer string) error {
	switch {
	case strings.HasPrefix(answer, "No such backend"), strings.HasPrefix(answer, "Can't find backend"):
		return fmt.Errorf("backend %q %w (haproxy said %q)", h.backend, ErrNotFound, answer)
	case strings.HasPrefix(answer, "No such server"):
		return fmt.Errorf("server %q %w in backend %q (haproxy said %q)", h.server, ErrNotFound, h.backend, answer)
	case strings.Contains(answer, "Permission denied"):
		return fmt.Errorf("haproxy said %q: the stats socket needs \"level admin\"", answer)
	}
	return fmt.Errorf("haproxy said %q", firstLine(answer))
}

// Command sends one runtime API command on a fresh connection and returns
// HAProxy's whole answer. It is exported for diagnostics and tests.
func (h *HAProxy) Command(ctx context.Context, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, h.network, h.address)
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("runtime API socket %s does not exist (is HAProxy running with \"stats socket ... level admin\"?): %w", h.address, err)
		case errors.Is(err, fs.ErrPermission):
			return "", fmt.Errorf("permission denied on runtime API socket %s (check the stats socket's mode/user/group): %w", h.address, err)
		}
		return "", fmt.Errorf("connect to runtime API %s: %w", h.socket, ctxErr(ctx, err))
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	// A cancelled context must interrupt a read that is already blocked.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := io.WriteString(conn, cmd+"\n"); err != nil {
		return "", fmt.Errorf("send to %s: %w", h.socket, ctxErr(ctx, err))
	}
	// Without "prompt", HAProxy answers one command and closes.
	out, err := io.ReadAll(io.LimitReader(conn, 64<<20))
	if err != nil {
		return "", fmt.Errorf("read answer from %s: %w", h.socket, ctxErr(ctx, err))
	}
	return string(out), nil
}

// State reads "show stat" (sessions, queue, status, weight) and "show
// servers state" (the admin drain/maint flags and configured weight) for
// the backend.
func (h *HAProxy) State(ctx context.Context) (State, error) {
	out, err := h.Command(ctx, "show stat")
	if err != nil {
		return State{}, fmt.Errorf("haproxy: show stat: %w", err)
	}
	servers, err := parseShowStat(out, h.backend)
	if err != nil {
		return State{}, fmt.Errorf("haproxy: show stat: %w", err)
	}
	if len(servers) == 0 {
		return State{}, fmt.Errorf("haproxy: show stat: backend %q %w (or has no servers)", h.backend, ErrNotFound)
	}
	cmd := "show servers state " + h.backend
	out, err = h.Command(ctx, cmd)
	if err != nil {
		return State{}, fmt.Errorf("haproxy: %s: %w", cmd, err)
	}
	admin, err := parseServersState(out, h.backend)
	if err != nil {
		return State{}, fmt.Errorf("haproxy: %s: %w", cmd, h.maybeAnswerError(out, err))
	}
	st := State{Known: true}
	found := false
	for _, s := range servers {
		if a, ok := admin[s.Server]; ok {
			s.Drained = a.state&adminForcedDrain != 0
			s.Maint = a.state&adminForcedMaint != 0
			s.InitialWeight = a.iweight
		}
		if s.Server == h.server {
			st.Self, found = s, true
			continue
		}
		st.Others = append(st.Others, s)
	}
	if !found {
		return State{}, fmt.Errorf("haproxy: show stat: server %q %w in backend %q", h.server, ErrNotFound, h.backend)
	}
	sort.Slice(st.Others, func(i, j int) bool { return st.Others[i].Server < st.Others[j].Server })
	return st, nil
}

func (h *HAProxy) maybeAnswerError(out string, err error) error {
	if a := strings.TrimSpace(out); a != "" && !strings.HasPrefix(a, "1") {
		return h.answerError(a)
	}
	return err
}

// parseShowStat reads the CSV of "show stat" by header name, so a newer
// HAProxy with more columns still parses, and returns the servers of
// backend (not the FRONTEND/BACKEND aggregate rows).
func parseShowStat(out, backend string) ([]ServerStatus, error) {
	if !strings.HasPrefix(out, "# ") {
		return nil, fmt.Errorf("unexpected answer %q (want a CSV header starting with \"# pxname\")", firstLine(out))
	}
	r := csv.NewReader(strings.NewReader(strings.TrimPrefix(out, "# ")))
	r.FieldsPerRecord = -1
	r.LazyQuotes = true
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("read CSV header: %w", err)
	}
	col := map[string]int{}
	for i, name := range header {
		col[name] = i
	}
	for _, need := range []string{"pxname", "svname", "qcur", "scur", "status", "weight"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("CSV header has no %q column", need)
		}
	}
	field := func(rec []string, name string) string {
		if i := col[name]; i < len(rec) {
			return rec[i]
		}
		return ""
	}
	var servers []ServerStatus
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read CSV: %w", err)
		}
		if field(rec, "pxname") != backend {
			continue
		}
		sv := field(rec, "svname")
		if sv == "FRONTEND" || sv == "BACKEND" {
			continue
		}
		s := ServerStatus{Backend: backend, Server: sv, Status: field(rec, "status")}
		for name, dst := range map[string]*int{"scur": &s.Sessions, "qcur": &s.Queued, "weight": &s.Weight} {
			if v := field(rec, name); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil {
					return nil, fmt.Errorf("server %s/%s: %s=%q is not a number", backend, sv, name, v)
				}
				*dst = n
			}
		}
		servers = append(servers, s)
	}
	return servers, nil
}

type adminState struct {
	state   int
	iweight int
}

// parseServersState reads "show servers state <backend>": a version line,
// a "# be_id be_name ..." header, then one space-separated line per
// server.
func parseServersState(out, backend string) (map[string]adminState, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[1], "# ") {
		return nil, fmt.Errorf("unexpected answer %q", firstLine(out))
	}
	col := map[string]int{}
	for i, name := range strings.Fields(strings.TrimPrefix(lines[1], "# ")) {
		col[name] = i
	}
	for _, need := range []string{"be_name", "srv_name", "srv_admin_state", "srv_iweight"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("header has no %q column", need)
		}
	}
	res := map[string]adminState{}
	for _, line := range lines[2:] {
		f := strings.Fields(line)
		if len(f) <= col["srv_iweight"] || len(f) <= col["srv_admin_state"] || f[col["be_name"]] != backend {
			continue
		}
		admin, err1 := strconv.Atoi(f[col["srv_admin_state"]])
		iw, err2 := strconv.Atoi(f[col["srv_iweight"]])
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("server %s/%s: %w", backend, f[col["srv_name"]], err)
		}
		res[f[col["srv_name"]]] = adminState{state: admin, iweight: iw}
	}
	return res, nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// ctxErr prefers the context's error to the deadline error it caused.
// A socket deadline set from the context can fire a moment before the
// context notices, so a timeout past the context's deadline counts too.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	var ne net.Error
	if dl, ok := ctx.Deadline(); ok && errors.As(err, &ne) && ne.Timeout() && !time.Now().Before(dl) {
		return fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
	}
	return err
}
