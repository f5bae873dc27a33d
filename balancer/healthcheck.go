package balancer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

// HealthCheck drains through a balancer's active HTTP check: its endpoint
// answers 200 while the host should take traffic and 503 with the reason
// while it should not. Draining and held (out of rotation until the
// engine recovers) are both 503: the balancer must send nothing. Restored
// but still ramping is 200 with the weight in the body: an HTTP check
// carries no weight, so the limiter's slow start does the ramp.
type HealthCheck struct {
	adv  *advertised
	path string
	ln   net.Listener
	srv  *http.Server
}

// NewHealthCheck binds cfg.Listen; Serve answers on it. A port it cannot
// bind is an error: a balancer polling nothing would keep the host out.
func NewHealthCheck(cfg configs.HealthCheck, now func() time.Time) (*HealthCheck, error) {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("healthcheck: listen (load_balancer.healthcheck.listen): %w", err)
	}
	h := &HealthCheck{adv: newAdvertised(now), path: cfg.Path, ln: ln}
	h.srv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	return h, nil
}

// Serve answers checks until ctx ends (nil) or the listener fails (the
// error): a balancer that cannot reach the endpoint marks the host down,
// so vigil must not run on without it.
func (h *HealthCheck) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- h.srv.Serve(h.ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = h.srv.Shutdown(sctx)
		<-errc
		return nil
	case err := <-errc:
		return fmt.Errorf("healthcheck %s: %w", h.Addr(), err)
	}
}

// Addr is the address the endpoint listens on.
func (h *HealthCheck) Addr() string { return h.ln.Addr().String() }

func (h *HealthCheck) String() string { return "healthcheck http://" + h.Addr() + h.path }

// ServeHTTP answers the balancer's check.
func (h *HealthCheck) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != h.path {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	ad := h.adv.read()
	if ad.Out {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, ad.outWords(h.adv.now()))
		return
	}
	if ad.Weight < 100 {
		fmt.Fprintf(w, "ready, weight %d%% (ramping up after a restart)\n", ad.Weight)
		return
	}
	fmt.Fprintln(w, "ready")
}

// Drain makes the endpoint answer 503 from now on.
func (h *HealthCheck) Drain(context.Context) error { h.adv.drain(); return nil }

// Ready makes it answer 200 again.
func (h *HealthCheck) Ready(context.Context) error { h.adv.ready(); return nil }

// SetWeight records the ramp's weight; the 200 body says it.
func (h *HealthCheck) SetWeight(_ context.Context, percent int) error {
	if _, err := h.adv.setWeight(percent); err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	return nil
}

// State is unknown: an HTTP check tells vigil nothing of the sessions,
// so the drain waits its whole timeout, time for the balancer's checks
// to fail.
func (h *HealthCheck) State(context.Context) (State, error) { return State{}, nil }

// StartDrained answers drained from the first poll (see Server).
func (h *HealthCheck) StartDrained() { h.adv.drain() }

// Close releases the listener (Serve, if running, returns an error).
func (h *HealthCheck) Close() error {
	_ = h.srv.Close()
	if err := h.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}
