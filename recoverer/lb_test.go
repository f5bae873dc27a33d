package recoverer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/configs"
)

// The real load balancers the recovery drives in its tests, set up as
// the balancer package's own tests set them up.

// backendServer is a server behind HAProxy; /slow answers once release
// is closed.
func backendServer(t *testing.T, release chan struct{}) *httptest.Server {
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

// startAgent serves an agent-check endpoint until the test ends.
func startAgent(t *testing.T, expect int, within time.Duration) *balancer.Agent {
	t.Helper()
	a, err := balancer.NewAgent(configs.Agent{Listen: "127.0.0.1:0", ExpectPolls: expect, ExpectWithin: within}, nil)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, a)
	return a
}

// serve runs s until the test ends; Serve must end without an error.
func serve(t *testing.T, s balancer.Server) {
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

// haproxyHead is the start of the HAProxy config the real-HAProxy tests
// write: the admin socket and the frontend (both %s, in that order), and
// the backend "vllm", whose lines the test adds.
const haproxyHead = `global
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
