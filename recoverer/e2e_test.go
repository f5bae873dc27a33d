package recoverer

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/restarter"
	"github.com/vigil-dev/vigil/state"
)

// TestRealRecoveryOfTheSimulatedEngine runs the whole sequence against
// real parts: the simulated engine (cmd/vllm-sim) in a container of the
// test dockerd, behind a real HAProxy; vigil drains it, restarts the
// container, waits for /v1/models and a completion, and restores it.
func TestRealRecoveryOfTheSimulatedEngine(t *testing.T) {
	testinfra.Long(t, "a whole recovery through a real dockerd and HAProxy")
	d := testinfra.StartDockerd(t)
	// The repository's own engine: if it does not build, that is a failure.
	bin := testinfra.BuildStatic(t, "./cmd/vllm-sim")
	d.ImportImage(t, "vigil-test/vllm-sim:1", testinfra.ImageFile{Src: bin, Dst: "/vllm-sim"})
	api, control := testinfra.FreeAddr(t), testinfra.FreeAddr(t)
	d.RunContainer(t, testinfra.Container{Name: "vllm", Image: "vigil-test/vllm-sim:1",
		Cmd: []string{"/vllm-sim", "-listen", api, "-control", control}})
	peer := testinfra.SlowBackend(t, nil)
	h := testinfra.StartHAProxyConfig(t, testinfra.HAProxyConfig{Backend: "vllm", HealthPath: "/health", Servers: []testinfra.Server{
		{Name: "node1", Addr: peer.Listener.Addr().String(), Check: true},
		{Name: "node2", Addr: api, Check: true},
	}})
	h.WaitStatus(t, "node2", "UP", 20*time.Second)

	client := &http.Client{Timeout: 5 * time.Second}
	ready := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+api+"/v1/models", nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/v1/models: %d", resp.StatusCode)
		}
		req, _ = http.NewRequestWithContext(ctx, "POST", "http://"+api+"/v1/completions",
			strings.NewReader(`{"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":"hi","max_tokens":1}`))
		req.Header.Set("Content-Type", "application/json")
		if resp, err = client.Do(req); err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("completion probe: %d", resp.StatusCode)
		}
		return nil
	}
	if err := ready(context.Background()); err != nil {
		t.Fatalf("the engine is not serving before the test: %v", err)
	}

	lb, rs := testConfigs()
	lb.HAProxy = configs.HAProxy{Socket: h.SocketURL(), Backend: "vllm", Server: "node2", Timeout: 2 * time.Second}
	lb.DrainTimeoutHung, lb.RampWeights, lb.RampDuration = time.Second, []int{10, 100}, 200*time.Millisecond
	rs.Docker = configs.DockerRestart{Host: d.Host, Container: "vllm", StopTimeout: 2 * time.Second}
	drainer, err := balancer.NewDrainer(lb)
	if err != nil {
		t.Fatal(err)
	}
	engine, err := restarter.New(rs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer engine.(*restarter.Docker).Close()
	before, err := engine.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	rep := &steps{}
	drainedDuring := make(chan string, 1)
	rec, err := New(Options{
		LoadBalancer: lb, Restart: rs, Drainer: drainer, Restarter: engine, Store: state.Memory(), Reporter: rep,
		Ready: func(ctx context.Context) error {
			select { // what HAProxy says while vigil waits for the engine
			case drainedDuring <- h.Stat(t)["node2"]["status"]:
			default:
			}
			return ready(ctx)
		},
		ReadyPoll: 100 * time.Millisecond, DrainPoll: 100 * time.Millisecond,
		Log: testLog(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	inc, v := hungIncident()
	rec.Recover(context.Background(), inc, v)
	rec.Wait()

	if got, want := joined(rep.names()), "drain,drain_wait,restarting,restart,wait_ready,restore,resolved"; got != want {
		t.Fatalf("steps %s, want %s: %+v", got, want, rep.s)
	}
	if st := <-drainedDuring; !strings.HasPrefix(st, "DRAIN") && !strings.HasPrefix(st, "DOWN") {
		t.Errorf("HAProxy said %q for node2 while it restarted, want DRAIN (or DOWN)", st)
	}
	after, err := engine.Status(context.Background())
	if err != nil || !after.StartedSince(before) {
		t.Fatalf("container start %+v, before %+v, %v", after, before, err)
	}
	h.WaitStatus(t, "node2", "UP", 5*time.Second)
	if w := h.Stat(t)["node2"]["weight"]; w != "100" {
		t.Fatalf("node2 weight %s after restore, want 100", w)
	}
	if err := ready(context.Background()); err != nil {
		t.Fatalf("engine after recovery: %v", err)
	}
}
