package recoverer

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/testinfra"
)

// polledRecovery is a recovery whose drainer is a polled balancer kind.
func polledRecovery(t *testing.T, d balancer.Server) *harness {
	t.Helper()
	lb, _ := testConfigs()
	lb.DrainTimeoutHung, lb.RampWeights, lb.RampDuration = 600*time.Millisecond, []int{25, 100}, 1500*time.Millisecond
	h := newHarness(t, func(o *Options) {
		o.LoadBalancer, o.Drainer = lb, d
		o.DrainPoll, o.ReadyPoll = 50*time.Millisecond, 50*time.Millisecond
	})
	h.w.readyAfter = 0
	return h
}

// Both servers of the backend have their own agent (one vigil per host)
// and two HAProxy poll both: a hang on node1 drains it in both, the
// ramp's first weight shows in both, the restore brings both back, and
// node2 serves throughout.
func TestAgentRealHAProxyPairRecoversAHungHost(t *testing.T) {
	a1 := startAgent(t, 2, 5*time.Second)
	a2 := startAgent(t, 0, 0)
	n1, n2 := testinfra.SlowBackend(t, nil), testinfra.SlowBackend(t, nil)
	_, p1, _ := net.SplitHostPort(a1.Addr())
	_, p2, _ := net.SplitHostPort(a2.Addr())
	pair := make([]*testinfra.HAProxy, 2)
	for i, name := range []string{"lb-a", "lb-b"} {
		pair[i] = testinfra.StartHAProxyText(t, "vllm", func(socket, frontend string) (string, error) {
			return fmt.Sprintf(testinfra.HAProxyHead+`    server node1 %s weight 100 check inter 200ms agent-check agent-port %s agent-inter 100ms agent-send "%s\n"
    server node2 %s weight 100 check inter 200ms agent-check agent-port %s agent-inter 100ms agent-send "%s\n"
`, socket, frontend, n1.Listener.Addr(), p1, name, n2.Listener.Addr(), p2, name), nil
		})
	}
	for _, hp := range pair {
		hp.WaitStatus(t, "node1", "UP", 5*time.Second)
		hp.WaitStatus(t, "node2", "UP", 5*time.Second)
	}
	h := polledRecovery(t, a1)
	during := make(chan [2]string, 1)
	h.w.readyFn = func(*world) error {
		select {
		case during <- [2]string{pair[0].Stat(t)["node1"]["status"], pair[1].Stat(t)["node1"]["status"]}:
		default:
		}
		return nil
	}
	inc, v := hungIncident()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.rec.Recover(context.Background(), inc, v)
		h.rec.Wait()
	}()
	// The ramp's first step (25%) lands in both before the last.
	for _, hp := range pair {
		testinfra.WaitFor(t, 5*time.Second, "node1 at 25% in "+hp.Dir, func() bool {
			row := hp.Stat(t)["node1"]
			return row["weight"] == "25" && row["status"] == "UP"
		})
	}
	<-done
	if got, want := joined(h.rep.names()), "drain,drain_wait,restarting,restart,wait_ready,restore,resolved"; got != want {
		t.Fatalf("steps %s, want %s: %+v", got, want, h.rep.s)
	}
	if st := <-during; st[0] != "DRAIN (agent)" || st[1] != "DRAIN (agent)" {
		t.Errorf("while the engine restarted, the pair said %q for node1, want DRAIN (agent) in both", st)
	}
	for _, hp := range pair {
		testinfra.WaitFor(t, 5*time.Second, "node1 back at 100% in "+hp.Dir, func() bool {
			row := hp.Stat(t)["node1"]
			return row["weight"] == "100" && row["status"] == "UP"
		})
		if row := hp.Stat(t)["node2"]; row["status"] != "UP" || row["weight"] != "100" {
			t.Errorf("node2 %+v in %s, want UP at 100 throughout", row["status"], hp.Dir)
		}
	}
}

// Real HAProxy's httpchk against the endpoint through a whole recovery:
// node1 is DOWN while the engine restarts and UP after.
func TestHealthCheckRealHAProxyRecoversAHungHost(t *testing.T) {
	hc, err := balancer.NewHealthCheck(configs.HealthCheck{Listen: "127.0.0.1:0", Path: "/ready"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	testinfra.Serve(t, hc)
	_, hcPort, _ := net.SplitHostPort(hc.Addr())
	n1 := testinfra.SlowBackend(t, nil)
	hp := testinfra.StartHAProxyText(t, "vllm", func(socket, frontend string) (string, error) {
		return fmt.Sprintf(testinfra.HAProxyHead+`    option httpchk GET /ready
    server node1 %s check port %s inter 100ms fall 2 rise 1
`, socket, frontend, n1.Listener.Addr(), hcPort), nil
	})
	hp.WaitStatus(t, "node1", "UP", 5*time.Second)
	h := polledRecovery(t, hc)
	during := make(chan string, 1)
	h.w.readyFn = func(*world) error {
		select {
		case during <- hp.Stat(t)["node1"]["status"]:
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
	if st := <-during; st != "DOWN" {
		t.Errorf("while the engine restarted HAProxy said %q, want DOWN (the check failed through the drain wait)", st)
	}
	hp.WaitStatus(t, "node1", "UP", 5*time.Second)
}
