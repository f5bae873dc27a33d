package balancer

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/testinfra"
)

func startHealthCheck(t *testing.T, now func() time.Time) *HealthCheck {
	t.Helper()
	h, err := NewHealthCheck(configs.HealthCheck{Listen: "127.0.0.1:0", Path: "/ready"}, now)
	if err != nil {
		t.Fatal(err)
	}
	testinfra.Serve(t, h)
	return h
}

func get(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func TestHealthCheckAnswersWhatTheBalancerShouldDo(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	clock := at
	h := startHealthCheck(t, func() time.Time { return clock })
	base := "http://" + h.Addr()
	ctx := context.Background()
	steps := []struct {
		name   string
		do     func()
		method string
		path   string
		code   int
		body   string
	}{
		{"a fresh vigil says ready", func() {}, "GET", "/ready", 200, "ready"},
		{"a HEAD check gets the status alone", func() {}, "HEAD", "/ready", 200, ""},
		{"a drained host is 503 with the reason", func() { h.Drain(ctx); clock = at.Add(40 * time.Second) }, "GET", "/ready", 503,
			"draining: vigil took this host out of rotation at 2026-12-02T03:00:00Z (40s ago) to recover the engine; it stays out until the engine serves again"},
		{"held out of rotation is still 503", func() { clock = at.Add(10 * time.Minute) }, "GET", "/ready", 503,
			"draining: vigil took this host out of rotation at 2026-12-02T03:00:00Z (10m0s ago) to recover the engine; it stays out until the engine serves again"},
		{"restored and ramping is 200 with the weight", func() { h.SetWeight(ctx, 10); h.Ready(ctx) }, "GET", "/ready", 200,
			"ready, weight 10% (ramping up after a restart)"},
		{"the end of the ramp is plain ready", func() { h.SetWeight(ctx, 100) }, "GET", "/ready", 200, "ready"},
		{"another path is not the check", func() {}, "GET", "/healthz", 404, "404 page not found"},
		{"a POST changes nothing", func() {}, "POST", "/ready", 405, "method not allowed"},
	}
	for _, s := range steps {
		s.do()
		code, body := get(t, s.method, base+s.path)
		if code != s.code || body != s.body {
			t.Errorf("%s: %d %q, want %d %q", s.name, code, body, s.code, s.body)
		}
	}
	if err := h.SetWeight(ctx, 0); err == nil {
		t.Error("a weight of 0% was accepted")
	}
	if st, err := h.State(ctx); err != nil || st.Known {
		t.Errorf("State = %+v, %v; an HTTP check cannot know the sessions", st, err)
	}
}

func TestHealthCheckOnATakenPortIsAnErrorNamingTheKey(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = NewDrainer(configs.LoadBalancer{Kind: "healthcheck", HealthCheck: configs.HealthCheck{Listen: ln.Addr().String(), Path: "/ready"}})
	if err == nil || !strings.Contains(err.Error(), "load_balancer.healthcheck.listen") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("err = %v", err)
	}
}

// Real HAProxy with "option httpchk" against the endpoint: the drain
// takes node1 DOWN, restore brings it back UP, node2 stays UP throughout.
func TestHealthCheckRealHAProxyHTTPCheck(t *testing.T) {
	hc := startHealthCheck(t, nil)
	_, hcPort, _ := net.SplitHostPort(hc.Addr())
	n1, n2 := testinfra.SlowBackend(t, nil), testinfra.SlowBackend(t, nil)
	h := testinfra.StartHAProxyText(t, "vllm", func(socket, frontend string) (string, error) {
		return fmt.Sprintf(testinfra.HAProxyHead+`    balance roundrobin
    option httpchk GET /ready
    http-check expect status 200
    server node1 %s check port %s inter 200ms fall 2 rise 1
    server node2 %s check inter 200ms fall 2 rise 1
`, socket, frontend, n1.Listener.Addr(), hcPort, n2.Listener.Addr()), nil
	})
	h.WaitStatus(t, "node1", "UP", 5*time.Second)
	h.WaitStatus(t, "node2", "UP", 5*time.Second)
	ctx := context.Background()

	if err := hc.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	h.WaitStatus(t, "node1", "DOWN", 5*time.Second)
	if got := h.Stat(t)["node2"]["status"]; got != "UP" {
		t.Fatalf("node2 %q after node1's drain", got)
	}
	if err := hc.SetWeight(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if err := hc.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	h.WaitStatus(t, "node1", "UP", 5*time.Second)
}
