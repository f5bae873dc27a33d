package recoverer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/restarter"
	"github.com/vigil-dev/vigil/state"
	"github.com/vigil-dev/vigil/watchdog"
)

// world is what the fakes share: the load balancer's and the engine's
// state, every call made, and the journal's step at the time of each call
// (to prove each step is journaled before it runs).
type world struct {
	mu    sync.Mutex
	store *state.Store

	// load balancer
	self      balancer.ServerStatus
	others    []balancer.ServerStatus
	sessions  int // in flight on self; stays until a restart aborts them
	drainErr  error
	readyErr  error
	weightErr error
	stateErr  error
	onDrain   func(w *world) // runs inside Drain (e.g. a peer drains too)

	// engine
	started    time.Time
	startID    int
	restarts   int // by vigil
	restartErr error
	stopTakes  time.Duration // the old engine answers this long into a restart
	statusErr  error
	unknown    bool                    // restarter cannot tell start times
	readyAfter time.Duration           // ready this long after a start
	readyFn    func(w *world) error    // overrides readyAfter
	kill       func(event string) bool // true: vigil dies at this event
	dead       bool                    // vigil died: later calls do nothing

	calls       []string
	journalAt   map[string]recovery.StepName // call → journal step when it was made
	limiter     []string
	readyChecks int
}

func newWorld(store *state.Store) *world {
	return &world{
		store:      store,
		self:       balancer.ServerStatus{Backend: "vllm", Server: "node2", Status: "UP", Weight: 100, InitialWeight: 100},
		others:     []balancer.ServerStatus{{Backend: "vllm", Server: "node1", Status: "UP", Weight: 100, InitialWeight: 100}, {Backend: "vllm", Server: "node3", Status: "UP", Weight: 100, InitialWeight: 100}},
		started:    time.Now().Add(-48 * time.Hour),
		readyAfter: 90 * time.Second,
		journalAt:  map[string]recovery.StepName{},
	}
}

var errKilled = errors.New("vigil was killed here")

// call records a call and decides whether vigil "dies" before or after it
// takes effect: the kill hook sees "<call>:before" and "<call>:after".
func (w *world) call(name string) (dieBefore bool) {
	if w.dead {
		return true
	}
	var j Journal
	w.store.Load(JournalSection, &j)
	w.calls = append(w.calls, name)
	if _, seen := w.journalAt[name]; !seen {
		w.journalAt[name] = j.Step
	}
	w.dead = w.kill != nil && w.kill(w.event(name)+":before")
	return w.dead
}

// event names the nth call of name: "state#3".
func (w *world) event(name string) string {
	n := 0
	for _, c := range w.calls {
		if c == name {
			n++
		}
	}
	return fmt.Sprintf("%s#%d", name, n)
}

func (w *world) dieAfter(name string) bool {
	w.dead = w.kill != nil && w.kill(w.event(name)+":after")
	return w.dead
}

func (w *world) mutating() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, c := range w.calls {
		if c != "state" && c != "status" && c != "readycheck" {
			out = append(out, c)
		}
	}
	return out
}

// now returns this host's LB status and vigil's restart count, under the
// lock (for checks while the recovery is still running).
func (w *world) now() (balancer.ServerStatus, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.self, w.restarts
}

// fakeLB is the Drainer over world.
type fakeLB struct{ w *world }

func (f fakeLB) String() string { return "haproxy vllm/node2" }

func (f fakeLB) Drain(ctx context.Context) error {
	w := f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.call("drain") {
		return errKilled
	}
	if w.drainErr != nil {
		return w.drainErr
	}
	w.self.Drained, w.self.Status = true, "DRAIN"
	if w.onDrain != nil {
		w.onDrain(w)
	}
	if w.dieAfter("drain") {
		return errKilled
	}
	return nil
}

func (f fakeLB) Ready(ctx context.Context) error {
	w := f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.call("ready") {
		return errKilled
	}
	if w.readyErr != nil {
		return w.readyErr
	}
	w.self.Drained, w.self.Status = false, "UP"
	if w.dieAfter("ready") {
		return errKilled
	}
	return nil
}

func (f fakeLB) SetWeight(ctx context.Context, p int) error {
	w := f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	name := fmt.Sprintf("weight %d", p)
	if w.call(name) {
		return errKilled
	}
	if w.weightErr != nil {
		return w.weightErr
	}
	w.self.Weight = p
	if w.dieAfter(name) {
		return errKilled
	}
	return nil
}

func (f fakeLB) State(ctx context.Context) (balancer.State, error) {
	w := f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.call("state") {
		return balancer.State{}, errKilled
	}
	if w.stateErr != nil {
		return balancer.State{}, w.stateErr
	}
	self := w.self
	self.Sessions = w.sessions
	return balancer.State{Known: true, Self: self, Others: append([]balancer.ServerStatus(nil), w.others...)}, nil
}

// fakeEngine is the Restarter over world.
type fakeEngine struct{ w *world }

func (f fakeEngine) String() string { return "docker container vllm" }

func (f fakeEngine) Restart(ctx context.Context) error {
	w := f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.call("restart") {
		return errKilled
	}
	if w.restartErr != nil {
		return w.restartErr
	}
	w.restarts++
	if w.stopTakes > 0 {
		w.mu.Unlock()
		time.Sleep(w.stopTakes)
		w.mu.Lock()
	}
	w.startLocked()
	if w.dieAfter("restart") {
		return errKilled
	}
	return nil
}

func (w *world) startLocked() {
	w.startID++
	w.started = time.Now()
	w.sessions = 0
}

// selfRestart is the engine restarting by itself (its supervisor).
func (w *world) selfRestart() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.startLocked()
}

func (f fakeEngine) Status(ctx context.Context) (restarter.EngineStatus, error) {
	w := f.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.call("status") {
		return restarter.EngineStatus{}, errKilled
	}
	if w.statusErr != nil {
		return restarter.EngineStatus{}, w.statusErr
	}
	if w.unknown {
		return restarter.EngineStatus{}, nil
	}
	return restarter.EngineStatus{Known: true, StartedAt: w.started, StartID: fmt.Sprint(w.startID), Running: true}, nil
}

func (w *world) ready(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.call("readycheck") {
		return errKilled
	}
	w.readyChecks++
	if w.readyFn != nil {
		return w.readyFn(w)
	}
	if w.restarts == 0 && w.startID == 0 {
		return Stuck(errors.New("probe outstanding for 240s"))
	}
	if time.Since(w.started) < w.readyAfter {
		return errors.New("GET /v1/models: connection refused")
	}
	return nil
}

type fakeLimiter struct{ w *world }

func (f fakeLimiter) SetRecovering(on bool) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.limiter = append(f.w.limiter, fmt.Sprintf("recovering=%v", on))
}

func (f fakeLimiter) SlowStart() {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.limiter = append(f.w.limiter, "slow_start")
}

// steps records what the pager was told.
type steps struct {
	mu sync.Mutex
	s  []recovery.Step
}

func (r *steps) RecoveryStep(s recovery.Step) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.s = append(r.s, s)
}

func (r *steps) names() []recovery.StepName {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []recovery.StepName
	for _, s := range r.s {
		out = append(out, s.Name)
	}
	return out
}

func (r *steps) last() recovery.Step {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.s) == 0 {
		return recovery.Step{}
	}
	return r.s[len(r.s)-1]
}

func (r *steps) find(n recovery.StepName) (recovery.Step, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.s {
		if s.Name == n {
			return s, true
		}
	}
	return recovery.Step{}, false
}

// harness builds a Recovery over a world.
type harness struct {
	w     *world
	store *state.Store
	rep   *steps
	logs  *bytes.Buffer
	opts  Options
	rec   *Recovery
}

func testConfigs() (configs.LoadBalancer, configs.Restart) {
	lb := configs.LoadBalancer{
		Kind: "haproxy", DrainTimeoutHung: 15 * time.Second, DrainTimeoutPlanned: 120 * time.Second,
		RampWeights: []int{10, 25, 50, 100}, RampDuration: 2 * time.Minute,
	}
	rs := configs.Restart{
		Kind: "docker", Docker: configs.DockerRestart{Host: "unix:///var/run/docker.sock", Container: "vllm", StopTimeout: 30 * time.Second},
		Cooldown: 30 * time.Minute, Budget: 3, BudgetWindow: 6 * time.Hour, ReadyTimeout: 20 * time.Minute,
	}
	return lb, rs
}

func newHarness(t *testing.T, tweak func(*Options)) *harness {
	t.Helper()
	store := state.Memory()
	h := &harness{w: newWorld(store), store: store, rep: &steps{}, logs: &bytes.Buffer{}}
	lb, rs := testConfigs()
	l := logrus.New()
	l.Out = &lockedWriter{b: h.logs}
	l.Level = logrus.DebugLevel
	h.opts = Options{
		LoadBalancer: lb, Restart: rs, StartupGrace: 10 * time.Minute,
		Drainer: fakeLB{h.w}, Restarter: fakeEngine{h.w}, Ready: h.w.ready,
		Store: store, Reporter: h.rep, Limiter: fakeLimiter{h.w},
		Log:    logrus.NewEntry(l),
		Jitter: func() float64 { return 1 }, // the top of each step: exact waits
	}
	if tweak != nil {
		tweak(&h.opts)
	}
	h.rec = h.newRecovery(t)
	return h
}

// newRecovery is a fresh vigil over the same store and world, as after a
// restart of vigil itself.
func (h *harness) newRecovery(t *testing.T) *Recovery {
	t.Helper()
	r, err := New(h.opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (h *harness) journal(t *testing.T) Journal {
	t.Helper()
	var j Journal
	if _, err := h.store.Load(JournalSection, &j); err != nil {
		t.Fatal(err)
	}
	return j
}

type lockedWriter struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (h *harness) logText() string {
	w := h.opts.Log.Logger.Out.(*lockedWriter)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// recoverUntilKilled runs a recovery of a hung incident and kills vigil
// (its context) at event, as a SIGKILL between two journaled steps would.
func (h *harness) recoverUntilKilled(event string) {
	ctx, cancel := context.WithCancel(context.Background())
	h.w.kill = func(ev string) bool {
		if ev == event {
			cancel()
			return true
		}
		return false
	}
	inc, v := hungIncident()
	h.rec.Recover(ctx, inc, v)
	h.rec.Wait()
}

func hungIncident() (watchdog.Incident, watchdog.Verdict) {
	now := time.Now()
	inc := watchdog.Incident{ID: "inc-1", Opened: now.Add(-4 * time.Minute), State: watchdog.StateHung, Peak: watchdog.StateHung, Changed: now}
	v := watchdog.Verdict{State: watchdog.StateHung, Reason: "no progress for 3m0s with 12 waiting", At: now}
	return inc, v
}

func joined[T ~string](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = string(x)
	}
	return strings.Join(s, ",")
}

// testLog logs through t.Log, so a failing test shows what vigil said.
func testLog(t testing.TB) *logrus.Entry {
	l := logrus.New()
	l.Out = tWriter{t}
	return logrus.NewEntry(l)
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func (r *steps) snapshot() []recovery.Step {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recovery.Step(nil), r.s...)
}
