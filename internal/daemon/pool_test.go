package daemon

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/recoverer"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/restarter"
	"github.com/vigil-dev/vigil/state"
	"github.com/vigil-dev/vigil/watchdog"
)

// poolMember is one vigil's recovery over real etcd; the engine is a fake
// whose restart takes a moment, and the pool notes how many members are
// between restart and ready at once.
type poolMember struct {
	rec   *recoverer.Recovery
	steps *stepLog
}

type stepLog struct {
	mu    sync.Mutex
	steps []recovery.Step
}

func (l *stepLog) RecoveryStep(s recovery.Step) {
	l.mu.Lock()
	l.steps = append(l.steps, s)
	l.mu.Unlock()
}
func (l *stepLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, s := range l.steps {
		b.WriteString(string(s.Name) + ": " + s.Detail + " " + s.Err + "\n")
	}
	return b.String()
}

type poolEngine struct {
	recovering, peak *atomic.Int32
	restarts         atomic.Int32
	up               atomic.Bool
}

func (e *poolEngine) Restart(context.Context) error {
	n := e.recovering.Add(1)
	for p := e.peak.Load(); n > p && !e.peak.CompareAndSwap(p, n); p = e.peak.Load() {
	}
	e.restarts.Add(1)
	time.Sleep(300 * time.Millisecond)
	e.up.Store(true)
	return nil
}
func (e *poolEngine) Status(context.Context) (restarter.EngineStatus, error) {
	return restarter.EngineStatus{}, nil
}
func (e *poolEngine) String() string { return "fake engine" }
func (e *poolEngine) ready(context.Context) error {
	if e.up.CompareAndSwap(true, false) {
		e.recovering.Add(-1)
	}
	return nil
}

func startMember(t *testing.T, node, endpoint string, recovering, peak *atomic.Int32) (*poolMember, *poolEngine) {
	t.Helper()
	cfg := configs.Default()
	cfg.Node = node
	cfg.Pool.Coordination = "etcd"
	cfg.Pool.Etcd.Endpoints = []string{endpoint}
	cfg.Pool.Etcd.LeaseTTL = 2 * time.Second
	cfg.Pool.Etcd.Timeout = time.Second
	cfg.Pool.Etcd.KeyPrefix = "/vigil/test-pool/"
	eng := &poolEngine{recovering: recovering, peak: peak}
	m := &poolMember{steps: &stepLog{}}
	ro := recoverer.Options{
		LoadBalancer: cfg.LoadBalancer, Restart: cfg.Restart, Drainer: balancer.NoDrain{}, Restarter: eng,
		Ready: eng.ready, Store: state.Memory(), Reporter: m.steps, ReadyPoll: 50 * time.Millisecond,
	}
	d := &daemon{}
	if err := d.wirePool(&cfg, &ro); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.turns.Close() })
	rec, err := recoverer.New(ro)
	if err != nil {
		t.Fatal(err)
	}
	m.rec = rec
	return m, eng
}

func hung(id string) (watchdog.Incident, watchdog.Verdict) {
	now := time.Now()
	return watchdog.Incident{ID: id, Opened: now, State: watchdog.StateHung, Peak: watchdog.StateHung, Changed: now},
		watchdog.Verdict{State: watchdog.StateHung, Reason: "no progress", At: now}
}

// Two vigils whose engines hang in the same instant recover one after the
// other through etcd.
func TestTwoVigilsRecoverOneAtATimeThroughEtcd(t *testing.T) {
	e := testinfra.StartEtcd(t)
	var recovering, peak atomic.Int32
	a, ea := startMember(t, "node1", e.Endpoint, &recovering, &peak)
	b, eb := startMember(t, "node2", e.Endpoint, &recovering, &peak)
	ctx := context.Background()
	ia, va := hung("inc-a")
	ib, vb := hung("inc-b")
	a.rec.Recover(ctx, ia, va)
	b.rec.Recover(ctx, ib, vb)
	a.rec.Wait()
	b.rec.Wait()
	if ea.restarts.Load() != 1 || eb.restarts.Load() != 1 {
		t.Fatalf("restarts %d and %d, want one each\n%s\n%s", ea.restarts.Load(), eb.restarts.Load(), a.steps.text(), b.steps.text())
	}
	if peak.Load() != 1 {
		t.Fatalf("%d members recovered at once, want 1", peak.Load())
	}
	waited := a.steps.text() + b.steps.text()
	if !strings.Contains(waited, "waiting for the pool's turn to recover: node") {
		t.Errorf("neither member said it waited for the other:\n%s", waited)
	}
}

// etcd stopped: no restart, a refusal that says why.
func TestEtcdDownNoRecoveryAndAPageSayingWhy(t *testing.T) {
	e := testinfra.StartEtcd(t)
	var recovering, peak atomic.Int32
	a, ea := startMember(t, "node1", e.Endpoint, &recovering, &peak)
	e.Stop()
	inc, v := hung("inc-a")
	a.rec.Recover(context.Background(), inc, v)
	a.rec.Wait()
	if ea.restarts.Load() != 0 {
		t.Fatal("restarted with etcd down")
	}
	if txt := a.steps.text(); !strings.Contains(txt, "guard_refused: cannot take the pool's turn (etcd unavailable at "+e.Endpoint) ||
		!strings.Contains(txt, "not draining on this vigil's own say-so") {
		t.Fatalf("steps:\n%s", txt)
	}
}
