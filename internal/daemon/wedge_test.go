package daemon

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/internal/testinfra/simengine"
	"github.com/vigil-dev/vigil/restarter"
	"github.com/vigil-dev/vigil/watchdog"
)

// clearingRestarter restarts the in-process simulated engine by lifting
// its faults, and counts the restarts.
type clearingRestarter struct {
	e *enginesim.Engine
	n atomic.Int32
}

func (r *clearingRestarter) Restart(context.Context) error {
	r.n.Add(1)
	r.e.Clear()
	return nil
}
func (r *clearingRestarter) Status(context.Context) (restarter.EngineStatus, error) {
	return restarter.EngineStatus{}, nil
}
func (r *clearingRestarter) String() string { return "the in-process simulated engine" }

// verdicts keeps every verdict the daemon's watchdog gives.
type verdicts struct {
	mu  sync.Mutex
	all []watchdog.Verdict
}

func (v *verdicts) add(x watchdog.Verdict) {
	v.mu.Lock()
	v.all = append(v.all, x)
	v.mu.Unlock()
}

func (v *verdicts) since(t time.Time) []watchdog.Verdict {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []watchdog.Verdict
	for _, x := range v.all {
		if !x.At.Before(t) {
			out = append(out, x)
		}
	}
	return out
}

// The false wedge of the scale-25 rig (bench/README.md): the engine's API
// server misses every probe's timeout while it answers the calls vigil
// proxies. The watchdog and the limiter run in one daemon, as `vigil run`
// wires them: the starved API server is never hung nor restarted, and a
// true wedge, whose last bytes end with the calls under way, still is.
func TestAStarvedAPIServerServingThroughVigilIsNotRestartedAndAWedgeIs(t *testing.T) {
	s := simengine.Start(t, func(c *enginesim.Config) { c.MaxNumSeqs = 8 })
	r := &clearingRestarter{e: s.Engine}
	rec := &verdicts{}
	// Probes time out at 300 ms, cycles are short beside hang_after (2 s).
	yml := strings.NewReplacer("admission:\n", "admission:\n  max_in_flight: 8\n",
		"request_timeout: 1s", "request_timeout: 300ms", "probe_timeout: 1s", "probe_timeout: 300ms", "probe_slo: 500ms", "probe_slo: 200ms").Replace(testinfra.DaemonConfig(t, s.URL()))
	td := startDaemonWith(t, yml, Options{Drainer: balancer.NoDrain{}, Restarter: r, OnCycle: rec.add})
	td.waitListening(t)
	load := testinfra.StartLoad(t, testinfra.LoadSpec{
		URL: td.proxyURL + "/v1/completions", Body: `{"prompt":"hello there","max_tokens":40,"stream":true}`,
		Clients: 8, Timeout: 20 * time.Second, PauseAfterFailure: 100 * time.Millisecond,
	})
	defer load.Stop()
	testinfra.WaitFor(t, 10*time.Second, "a serving verdict", func() bool {
		vs := rec.since(time.Time{})
		return len(vs) > 0 && (vs[len(vs)-1].State == watchdog.StateHealthy || vs[len(vs)-1].State == watchdog.StateSaturated)
	})

	// Starved: every probe times out, vigil's calls are served 500 ms
	// late, for two and a half hang_after.
	starved := time.Now()
	s.Engine.StarveAPI(500 * time.Millisecond)
	time.Sleep(5 * time.Second)
	s.Engine.StarveAPI(0)
	vs := rec.since(starved)
	vetoed := 0
	for _, v := range vs {
		if v.State == watchdog.StateHung || v.State == watchdog.StateDown {
			t.Fatalf("a starved API server serving through vigil was called %s: %s", v.State, v.Reason)
		}
		if v.State == watchdog.StateSaturated && strings.Contains(v.Reason, "calls answered through vigil") {
			vetoed++
		}
	}
	t.Logf("%d of %d verdicts while starved said the calls answered through vigil; last: %s", vetoed, len(vs), vs[len(vs)-1].Reason)
	if vetoed == 0 {
		t.Fatalf("no verdict said the calls answered through vigil while every endpoint timed out for hang_after; verdicts:\n%s", reasons(vs))
	}
	if n := r.n.Load(); n != 0 {
		t.Fatalf("restarted %d times while starved and serving", n)
	}
	if ok, _ := load.Tally(starved, time.Now()); ok == 0 {
		t.Fatal("no call answered through vigil while starved")
	}

	// Wedged: the calls under way end, nothing more comes: hung, restarted.
	wedged := time.Now()
	s.Engine.Wedge()
	testinfra.WaitFor(t, 15*time.Second, "the wedge restarted", func() bool { return r.n.Load() >= 1 })
	var hung *watchdog.Verdict
	for _, v := range rec.since(wedged) {
		if v.State == watchdog.StateHung {
			hung = &v
			break
		}
	}
	if hung == nil || hung.Evidence.Hang != watchdog.HangWedged || !strings.Contains(hung.Reason, "no byte through vigil's limiter for") {
		t.Fatalf("restarted without a wedged verdict that heard nothing through vigil: %+v", hung)
	}
	t.Logf("wedge hung after %s: %s", hung.At.Sub(wedged).Round(time.Millisecond), hung.Reason)
}

func reasons(vs []watchdog.Verdict) string {
	var b strings.Builder
	for _, v := range vs {
		b.WriteString(v.At.Format("15:04:05.000") + " " + v.Reason + "\n")
	}
	return b.String()
}
