package testinfra

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/vigil-dev/vigil/internal/haproxystat"
)

// Server is one backend server of a test HAProxy.
type Server struct {
	Name string
	Addr string // host:port
	// Weight is the configured weight (default 100).
	Weight int
	// Check turns on health checks every 200ms (an HTTP GET of
	// HAProxyConfig.HealthPath if set, else a TCP connect).
	Check bool
}

// HAProxyConfig describes a test HAProxy: one frontend on a free loopback
// port in front of one backend.
type HAProxyConfig struct {
	Backend string
	Servers []Server
	// HealthPath, if set, makes checks "GET HealthPath" expecting 2xx/3xx.
	HealthPath string
}

// HAProxy is a running test HAProxy.
type HAProxy struct {
	// Socket is the admin runtime API socket's path.
	Socket string
	// Frontend is the "127.0.0.1:port" clients connect to.
	Frontend string
	Backend  string
	// Dir holds the config, the socket and the log.
	Dir string

	stopOnce sync.Once
	stopFn   func(exited chan error)
	exited   chan error
}

// Stop ends this HAProxy now, before the test ends (a balancer of a pair
// gone away); the test's cleanup then has nothing left to stop.
func (h *HAProxy) Stop() { h.stopOnce.Do(func() { h.stopFn(h.exited) }) }

// SocketURL is the socket as vigil's config writes it: "unix:///path".
func (h *HAProxy) SocketURL() string { return "unix://" + h.Socket }

// URL is the frontend's base URL.
func (h *HAProxy) URL() string { return "http://" + h.Frontend }

// StartHAProxy starts "haproxy -f cfg -db" with backend holding servers,
// waits for its admin socket, and stops it when the test ends. It skips
// the test (fails under VIGIL_REQUIRE_HAPROXY=1) if HAProxy cannot start.
func StartHAProxy(t testing.TB, backend string, servers ...Server) *HAProxy {
	t.Helper()
	return StartHAProxyConfig(t, HAProxyConfig{Backend: backend, Servers: servers})
}

var haproxyConfig = template.Must(template.New("cfg").Parse(`global
    stats socket {{.Socket}} level admin
    stats timeout 30s
defaults
    mode http
    timeout connect 2s
    timeout client 300s
    timeout server 300s
    timeout queue 60s
frontend fe
    bind {{.Frontend}}
    default_backend {{.Backend}}
backend {{.Backend}}
    balance roundrobin
{{- if .HealthPath}}
    option httpchk GET {{.HealthPath}}
{{- end}}
{{- range .Servers}}
    server {{.Name}} {{.Addr}} weight {{.Weight}}{{if .Check}} check inter 200ms fall 2 rise 1{{end}}
{{- end}}
`))

// StartHAProxyConfig is StartHAProxy with every option.
func StartHAProxyConfig(t testing.TB, cfg HAProxyConfig) *HAProxy {
	t.Helper()
	servers := make([]Server, len(cfg.Servers))
	for i, s := range cfg.Servers {
		if s.Weight == 0 {
			s.Weight = 100
		}
		servers[i] = s
	}
	return StartHAProxyText(t, cfg.Backend, func(socket, frontend string) (string, error) {
		var text bytes.Buffer
		err := haproxyConfig.Execute(&text, map[string]any{
			"Socket": socket, "Frontend": frontend, "Backend": cfg.Backend, "Servers": servers, "HealthPath": cfg.HealthPath,
		})
		return text.String(), err
	})
}

// StartHAProxyText starts HAProxy with the configuration render returns
// for a fresh admin socket path and a free loopback frontend address (a
// shipped file with those two filled in), backend being the backend whose
// servers Stat reports. It skips or fails like StartHAProxy.
func StartHAProxyText(t testing.TB, backend string, render func(socket, frontend string) (string, error)) *HAProxy {
	t.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		Unavailable(t, "HAPROXY", RequireHAProxyEnv, err)
	}
	dir, err := shortTempDir("vh")
	if err != nil {
		t.Fatalf("testinfra: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h := &HAProxy{Socket: filepath.Join(dir, "admin.sock"), Frontend: FreeAddr(t), Backend: backend, Dir: dir}
	text, err := render(h.Socket, h.Frontend)
	if err != nil {
		t.Fatalf("testinfra: haproxy config: %v", err)
	}
	cfgPath := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfgPath, []byte(text), 0o600); err != nil {
		t.Fatalf("testinfra: %v", err)
	}
	cmd := exec.Command(bin, "-f", cfgPath, "-db")
	h.stopFn = func(exited chan error) {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			exited <- err
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			exited <- <-exited
		}
	}
	h.exited = daemon{what: "HAPROXY", env: RequireHAProxyEnv, cmd: cmd,
		logPath: filepath.Join(dir, "haproxy.log"), within: 10 * time.Second, poll: 20 * time.Millisecond,
		ready: func() error {
			out, err := h.command("show info")
			if err == nil && !strings.Contains(out, "Name: HAProxy") {
				err = fmt.Errorf("admin socket %s answered %q", h.Socket, strings.SplitN(out, "\n", 2)[0])
			}
			return err
		},
		stop: func(_ *exec.Cmd, exited chan error) { h.stopOnce.Do(func() { h.stopFn(exited) }) },
	}.start(t)
	return h
}

// Command sends one runtime API command and returns the answer. It is for
// setting up and checking tests; the code under test has its own client.
func (h *HAProxy) Command(t testing.TB, cmd string) string {
	t.Helper()
	out, err := h.command(cmd)
	if err != nil {
		t.Fatalf("testinfra: haproxy %q: %v", cmd, err)
	}
	return out
}

func (h *HAProxy) command(cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", h.Socket)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, cmd+"\n"); err != nil {
		return "", err
	}
	out, err := io.ReadAll(conn)
	return string(out), err
}

// Stat returns "show stat" for the backend's servers: server name →
// column name → value (e.g. stat["node1"]["status"] == "DRAIN").
func (h *HAProxy) Stat(t testing.TB) map[string]map[string]string {
	t.Helper()
	res, err := h.Servers()
	if err != nil {
		t.Fatalf("testinfra: %v", err)
	}
	return res
}

// Servers is Stat returning its error, for use off the test goroutine
// (e.g. a monitor sampling every server in one read).
func (h *HAProxy) Servers() (map[string]map[string]string, error) {
	out, err := h.command("show stat")
	if err != nil {
		return nil, fmt.Errorf("haproxy \"show stat\": %w", err)
	}
	return haproxystat.Parse(out, h.Backend)
}

// WaitStatus waits up to timeout for server's "show stat" status to be
// want (e.g. "UP" once health checks pass).
func (h *HAProxy) WaitStatus(t testing.TB, server, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := h.Stat(t)[server]["status"]
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testinfra: haproxy %s/%s status %q, want %q after %s", h.Backend, server, got, want, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}
