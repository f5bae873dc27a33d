package testinfra

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The pieces the load-balancer and recovery tests, and the daemon's and
// the command's, set up alike.

// SlowBackend is a loopback engine stand-in behind a load balancer: every
// path answers 200, /slow only once release is closed (or its client
// leaves). It is closed when the test ends.
func SlowBackend(t testing.TB, release chan struct{}) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.Close)
	return s
}

// Served is a server a test runs in the background: an agent-check or
// health-check endpoint of package balancer.
type Served interface {
	Serve(ctx context.Context) error
	Close() error
}

// Serve runs s until the test ends, then checks that Serve ended without
// an error and closes it.
func Serve(t testing.TB, s Served) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		s.Close()
	})
}

// HAProxyHead is the start of the HAProxy config the real-HAProxy tests
// write: the admin socket and the frontend (both %s, in that order), and
// the backend "vllm", whose lines the test adds.
const HAProxyHead = `global
    stats socket %s level admin
defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    timeout check 1s
frontend fe
    bind %s
    default_backend vllm
backend vllm
`

// NewJSONPost is a POST of a JSON body to url.
func NewJSONPost(ctx context.Context, url, body string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err == nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, err
}

// Drain reads resp's body to its end and closes it, so its connection is
// reused.
func Drain(resp *http.Response) {
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}
