package recoverer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/testinfra"
)

// haproxyPair is two real HAProxy with the same backend in front of the
// same two servers, as a pair behind keepalived would be.
func haproxyPair(t *testing.T) []*testinfra.HAProxy {
	t.Helper()
	n1, n2 := testinfra.SlowBackend(t, nil), testinfra.SlowBackend(t, nil)
	cfg := testinfra.HAProxyConfig{Backend: "vllm", HealthPath: "/health", Servers: []testinfra.Server{
		{Name: "node1", Addr: n1.Listener.Addr().String(), Check: true},
		{Name: "node2", Addr: n2.Listener.Addr().String(), Check: true},
	}}
	pair := []*testinfra.HAProxy{testinfra.StartHAProxyConfig(t, cfg), testinfra.StartHAProxyConfig(t, cfg)}
	for _, h := range pair {
		h.WaitStatus(t, "node2", "UP", 5*time.Second)
	}
	return pair
}

func pairRecovery(t *testing.T, pair []*testinfra.HAProxy) *harness {
	t.Helper()
	hcfg := configs.HAProxy{Sockets: []string{pair[0].SocketURL(), pair[1].SocketURL()}, Backend: "vllm", Server: "node2", Timeout: time.Second}
	lb, _ := testConfigs()
	lb.HAProxy = hcfg
	lb.DrainTimeoutHung, lb.RampWeights, lb.RampDuration = 300*time.Millisecond, []int{10, 100}, 200*time.Millisecond
	drainer, err := balancer.NewDrainer(lb)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := drainer.(*balancer.HAProxySet); !ok {
		t.Fatalf("two sockets built a %T", drainer)
	}
	h := newHarness(t, func(o *Options) {
		o.LoadBalancer, o.Drainer = lb, drainer
		o.DrainPoll, o.ReadyPoll = 50*time.Millisecond, 50*time.Millisecond
	})
	h.w.readyAfter = 0
	return h
}

func TestHAProxyPairDrainsAndRestoresOnBothAroundOneRestart(t *testing.T) {
	pair := haproxyPair(t)
	h := pairRecovery(t, pair)
	during := make(chan []string, 1)
	h.w.readyFn = func(*world) error {
		select { // what each HAProxy says while vigil waits for the engine
		case during <- []string{pair[0].Stat(t)["node2"]["status"], pair[1].Stat(t)["node2"]["status"]}:
		default:
		}
		return nil
	}
	inc, v := hungIncident()
	h.rec.Recover(context.Background(), inc, v)
	h.rec.Wait()
	if got, want := joined(h.rep.names()), "drain,drain_wait,restarting,restart,wait_ready,restore,resolved"; got != want {
		t.Fatalf("steps %s, want %s: %+v", got, want, h.rep.s)
	}
	if st := <-during; st[0] != "DRAIN" || st[1] != "DRAIN" {
		t.Errorf("while the engine restarted, the pair said %q, want DRAIN on both", st)
	}
	if h.w.restarts != 1 {
		t.Errorf("%d restarts, want 1", h.w.restarts)
	}
	for i, hp := range pair {
		row := hp.Stat(t)["node2"]
		if row["status"] != "UP" || row["weight"] != "100" {
			t.Errorf("haproxy %d after restore: status %q weight %q, want UP at 100", i, row["status"], row["weight"])
		}
	}
}

func TestHAProxyPairWithOneStoppedIsARefusalNamingIt(t *testing.T) {
	pair := haproxyPair(t)
	h := pairRecovery(t, pair)
	pair[1].Stop()
	inc, v := hungIncident()
	h.rec.Recover(context.Background(), inc, v)
	h.rec.Wait()
	if h.w.restarts != 0 {
		t.Fatalf("the engine was restarted %d times with one balancer unreachable", h.w.restarts)
	}
	failed, ok := h.rep.find("failed")
	if !ok {
		t.Fatalf("no failed step: %+v", h.rep.s)
	}
	// The drain step reads both before it changes anything: the one gone
	// is named.
	for _, want := range []string{"1 of 2 runtime APIs did not confirm", pair[1].SocketURL(), "connection refused"} {
		if !strings.Contains(failed.Err, want) {
			t.Errorf("the failure %q does not say %q", failed.Err, want)
		}
	}
	if !strings.Contains(failed.Detail, "not restarting an undrained host") {
		t.Errorf("detail %q", failed.Detail)
	}
	if st := pair[0].Stat(t)["node2"]["status"]; st != "UP" {
		t.Errorf("the reachable HAProxy says %q for node2, want UP", st)
	}

	// A drain itself that one of them does not confirm is the error,
	// naming it; the recovery then puts the other back (Ready).
	err := h.opts.Drainer.Drain(context.Background())
	if err == nil || !strings.Contains(err.Error(), "haproxy: drain: 1 of 2 runtime APIs did not confirm: "+pair[1].SocketURL()) {
		t.Fatalf("drain with one stopped: %v", err)
	}
	if st := pair[0].Stat(t)["node2"]["status"]; st != "DRAIN" {
		t.Errorf("the reachable HAProxy says %q after the drain, want DRAIN", st)
	}
	if err := h.opts.Drainer.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), pair[1].SocketURL()) {
		t.Errorf("ready with one stopped: %v", err)
	}
	if st := pair[0].Stat(t)["node2"]["status"]; st != "UP" {
		t.Errorf("the reachable HAProxy says %q after ready, want UP", st)
	}
}
