package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// HAProxy is a private HAProxy process (mode http) on a loopback port in
// front of one upstream (StartHAProxy, for comparing proxy costs) or of a
// pool (StartHAProxyText, with the shipped pool configuration).
type HAProxy struct {
	// Addr is the frontend's "127.0.0.1:port".
	Addr string
	// Socket is the runtime API socket's path (StartHAProxyText only).
	Socket string
	dir    string
	cmd    *exec.Cmd
	exited chan error
}

// haproxyConfig keeps HAProxy close to how it is deployed in front of an
// engine: HTTP mode, keep-alive both sides, no buffering of responses (SSE
// passes through), generous timeouts, two threads on this 2-core machine.
const haproxyConfig = `global
    maxconn 4096
    nbthread %d
defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 300s
    timeout server 300s
    timeout http-keep-alive 60s
frontend fe
    bind %s
    default_backend engine
backend engine
    http-reuse always
    server upstream %s maxconn 4096
`

// StartHAProxy runs "haproxy -db -f <config>" in front of upstream
// (host:port) with threads threads and waits until its port accepts
// connections.
func StartHAProxy(ctx context.Context, upstream string, threads int) (*HAProxy, error) {
	return StartHAProxyText(ctx, func(_, bind string) (string, error) {
		return fmt.Sprintf(haproxyConfig, max(1, threads), bind, upstream), nil
	})
}

// StartHAProxyText runs "haproxy -db -f <config>" with the configuration
// render returns for a runtime API socket path in a private directory and
// a free loopback frontend address, and waits until the frontend accepts
// connections.
func StartHAProxyText(ctx context.Context, render func(socket, bind string) (string, error)) (*HAProxy, error) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		for _, p := range []string{"/usr/sbin/haproxy", "/usr/local/sbin/haproxy"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("haproxy: not installed (apt-get install haproxy): %w", err)
		}
	}
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "vigil-bench-haproxy")
	if err != nil {
		return nil, fmt.Errorf("haproxy: temp dir: %w", err)
	}
	socket := filepath.Join(dir, "admin.sock")
	text, err := render(socket, addr)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("haproxy: config: %w", err)
	}
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("haproxy: write config: %w", err)
	}
	logf, err := os.Create(filepath.Join(dir, "haproxy.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("haproxy: log file: %w", err)
	}
	cmd := exec.Command(bin, "-db", "-f", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	// If the benchmark dies, its HAProxy dies with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("haproxy: start: %w", err)
	}
	h := &HAProxy{Addr: addr, Socket: socket, dir: dir, cmd: cmd, exited: make(chan error, 1)}
	go func() { h.exited <- cmd.Wait(); logf.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, derr := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if derr == nil {
			c.Close()
			return h, nil
		}
		select {
		case werr := <-h.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "haproxy.log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("haproxy: exited before listening (%v): %s", werr, strings.TrimSpace(string(log)))
		case <-ctx.Done():
			h.Close()
			return nil, fmt.Errorf("haproxy: start: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			h.Close()
			return nil, fmt.Errorf("haproxy: %s not accepting after 10s: %w", addr, derr)
		}
	}
}

// URL is the frontend's base URL.
func (h *HAProxy) URL() string { return "http://" + h.Addr }

// Close stops the process (SIGTERM, then SIGKILL after 5 s) and removes
// its files.
func (h *HAProxy) Close() {
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(5 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.exited
	}
	os.RemoveAll(h.dir)
}

// FreeAddr returns a loopback "127.0.0.1:port" that was free a moment ago.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
