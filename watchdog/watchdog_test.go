package watchdog

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/probes"
	"github.com/vigil-dev/vigil/state"
)

// rig is one watchdog over a fake engine, inside a synctest bubble: the
// defaults of the config (15 s interval, 3 min hang_after) run in fake time.
type rig struct {
	t       *testing.T
	engine  *fakeEngine
	pager   *fakePager
	rec     *fakeRecoverer
	limiter *fakeLimiter
	hook    *logtest.Hook
	reg     *prometheus.Registry
	w       *Watchdog
	cycles  int
	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
}

func newRig(t *testing.T, store *state.Store, tweak func(*Options)) *rig {
	t.Helper()
	cfg := configs.Default()
	// The loop's tests judge against a fixed window; window_test.go
	// covers hang_after: auto.
	cfg.Watchdog.HangAfter = configs.Fixed(3 * time.Minute)
	logger, hook := logtest.NewNullLogger()
	logger.SetLevel(logrus.DebugLevel)
	r := &rig{t: t, engine: newFakeEngine(), pager: &fakePager{}, rec: &fakeRecoverer{busyFor: 10 * time.Minute},
		limiter: &fakeLimiter{}, hook: hook, reg: prometheus.NewRegistry()}
	opts := Options{
		Engine: cfg.Engine, Watchdog: cfg.Watchdog, UnknownAfter: cfg.Alerts.UnknownAfter, Node: "node1",
		Probes: r.engine, Pager: r.pager, Recoverer: r.rec, Limiter: r.limiter, Store: store,
		Log: logrus.NewEntry(logger), Registerer: r.reg,
		OnCycle: func(Verdict) { r.mu.Lock(); r.cycles++; r.mu.Unlock() },
	}
	if tweak != nil {
		tweak(&opts)
	}
	w, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.w = w
	return r
}

func (r *rig) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go func() {
		defer close(r.done)
		if err := r.w.Run(ctx); err != nil {
			r.t.Errorf("Run: %v", err)
		}
	}()
}

func (r *rig) stop() {
	r.cancel()
	<-r.done
}

// firstAt returns when the pager was first told state s (zero if never).
func (r *rig) firstAt(s State) time.Time {
	for _, p := range r.pager.all() {
		if p.v.State == s {
			return p.v.At
		}
	}
	return time.Time{}
}

// incidentIDs lists the distinct incident IDs the pager was given.
func (r *rig) incidentIDs() []string {
	var ids []string
	seen := map[string]bool{}
	for _, p := range r.pager.all() {
		if p.inc != nil && !seen[p.inc.ID] {
			seen[p.inc.ID] = true
			ids = append(ids, p.inc.ID)
		}
	}
	return ids
}

// Twenty minutes of one-second cycles (work is pending throughout):
// long enough for the window's history, the capacity and retry-storm
// windows and the probe's timeouts to turn over several times.
func TestSaturatedForTwentyMinutesNeverRestarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil, nil)
		r.engine.set(func(f *fakeEngine) {
			f.waiting, f.running, f.tokensPerSec = 99, 8, 2340
			f.probeLatency = 2 * time.Minute // every probe times out at 90 s
		})
		r.start()
		time.Sleep(20*time.Minute + time.Second) // the cycle at 20m completes
		r.stop()

		if n := r.rec.count(); n != 0 {
			t.Fatalf("a saturated engine was recovered %d times", n)
		}
		if at := r.firstAt(StateHung); !at.IsZero() {
			t.Fatalf("a saturated engine was called hung at %s", at)
		}
		if ids := r.incidentIDs(); len(ids) != 1 {
			t.Fatalf("incidents %v, want exactly one", ids)
		}
		if now, _ := r.limiter.get(); !now {
			t.Fatal("the limiter was not told the engine is saturated")
		}
		v, inc := r.w.Current()
		if v.State != StateSaturated || !inc.Open() || inc.Peak != StateSaturated {
			t.Fatalf("current %s %+v", v.State, inc)
		}
		if !strings.HasPrefix(v.Reason, "SATURATED: 99 waiting, 8 running, 2,3") || !strings.Contains(v.Reason, "not restarting") {
			t.Fatalf("reason %q", v.Reason)
		}
		if got := testutil.ToFloat64(r.w.metrics.state.WithLabelValues("saturated")); got != 1 {
			t.Fatalf("vigil_watchdog_state{state=saturated} = %v", got)
		}
		if got := testutil.ToFloat64(r.w.metrics.opened); got != 1 {
			t.Fatalf("incidents opened = %v", got)
		}
		r.mu.Lock()
		cycles := r.cycles
		r.mu.Unlock()
		// Work is pending throughout: a cycle every fastCycle.
		if want := int(20*time.Minute/fastCycle(configs.Default().Watchdog.Interval)) + 1; cycles != want {
			t.Fatalf("OnCycle called %d times in 20 minutes of fast cycles, want %d", cycles, want)
		}
	})
}

func TestHangUnderLoadIsRecoveredOnceAndResolvesAfterTheRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil, nil)
		r.engine.set(func(f *fakeEngine) { f.waiting, f.running, f.tokensPerSec = 40, 8, 900 })
		r.start()
		time.Sleep(5 * time.Minute)
		hungAt := time.Now()
		r.engine.set(func(f *fakeEngine) { f.mode = "hung" })
		time.Sleep(4 * time.Minute)

		at := r.firstAt(StateHung)
		if at.IsZero() {
			t.Fatal("the hang was never detected")
		}
		cfg := configs.Default().Watchdog
		if took := at.Sub(hungAt); took > cfg.HangAfterCeiling()+2*cfg.Interval {
			t.Fatalf("hang detected after %s, want within hang_after + 2 intervals (%s)", took, cfg.HangAfterCeiling()+2*cfg.Interval)
		}
		if n := r.rec.count(); n != 1 {
			t.Fatalf("recoveries asked %d, want 1 (the recoverer stays busy)", n)
		}
		// The recovery brings the engine back while still busy: the
		// incident stays open until it finishes.
		r.engine.set(func(f *fakeEngine) { f.mode = "serving"; f.waiting = 0 })
		time.Sleep(time.Minute)
		if _, inc := r.w.Current(); !inc.Open() {
			t.Fatal("the incident resolved while the recovery was busy")
		}
		time.Sleep(10 * time.Minute)
		r.stop()
		v, inc := r.w.Current()
		if v.State != StateHealthy || inc != nil {
			t.Fatalf("after the recovery: %s, incident %+v", v.State, inc)
		}
		ids := r.incidentIDs()
		if len(ids) != 1 || !strings.HasPrefix(ids[0], "node1-") {
			t.Fatalf("incident IDs %v", ids)
		}
		var resolved *Incident
		for _, p := range r.pager.all() {
			if p.inc != nil && !p.inc.Resolved.IsZero() {
				resolved = p.inc
			}
		}
		if resolved == nil || resolved.Peak != StateHung || resolved.State != StateHealthy {
			t.Fatalf("the pager never saw the resolve with peak hung: %+v", resolved)
		}
		if r.rec.calls[0].ID != ids[0] {
			t.Fatalf("recovered incident %q, paged %q", r.rec.calls[0].ID, ids[0])
		}
	})
}

func TestDryRunStillAsksTheRecovererAndSaysSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil, func(o *Options) { o.Watchdog.DryRun = true })
		r.start()
		time.Sleep(time.Minute)
		r.engine.set(func(f *fakeEngine) { f.mode = "down" })
		time.Sleep(time.Minute)
		r.stop()
		if r.rec.count() != 1 {
			t.Fatalf("recoverer asked %d times, want 1", r.rec.count())
		}
		found := false
		for _, e := range r.hook.AllEntries() {
			if strings.Contains(e.Message, "dry-run") || e.Data["action"] == "dry-run: would drain and restart" {
				found = true
			}
		}
		if !found {
			t.Fatal("dry-run was not logged")
		}
	})
}

func TestVigilRestartedMidHangKeepsTheFrozenClock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	synctest.Test(t, func(t *testing.T) {
		store, err := state.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		first := newRig(t, store, nil)
		first.engine.set(func(f *fakeEngine) { f.waiting, f.running, f.tokensPerSec = 40, 8, 900 })
		first.start()
		time.Sleep(2 * time.Minute)
		hungAt := time.Now()
		first.engine.set(func(f *fakeEngine) { f.mode = "hung" })
		time.Sleep(2 * time.Minute)
		first.stop()
		if !first.firstAt(StateHung).IsZero() {
			t.Fatal("hung before hang_after")
		}

		time.Sleep(20 * time.Second) // systemd restarts vigil
		reopened, err := state.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		second := newRig(t, reopened, nil)
		second.engine = first.engine
		second.w.probes = first.engine
		second.start()
		time.Sleep(3 * time.Minute)
		second.stop()

		at := second.firstAt(StateHung)
		if at.IsZero() {
			t.Fatal("the restarted vigil never saw the hang")
		}
		cfg := configs.Default().Watchdog
		if took := at.Sub(hungAt); took > cfg.HangAfterCeiling()+2*cfg.Interval {
			t.Fatalf("hung detected %s after the hang: the restarted vigil waited a fresh hang_after", took)
		}
	})
}

func TestVigilRestartedDuringAnIncidentKeepsTheSameIncident(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	synctest.Test(t, func(t *testing.T) {
		store, _ := state.Open(path)
		first := newRig(t, store, nil)
		first.engine.set(func(f *fakeEngine) { f.waiting, f.running, f.tokensPerSec = 99, 8, 900 })
		first.start()
		time.Sleep(2 * time.Minute)
		first.stop()
		ids := first.incidentIDs()
		if len(ids) != 1 {
			t.Fatalf("first vigil: incidents %v", ids)
		}

		reopened, _ := state.Open(path)
		second := newRig(t, reopened, nil)
		second.engine = first.engine
		second.w.probes = first.engine
		second.start()
		time.Sleep(time.Minute)
		second.stop()
		if got := second.incidentIDs(); len(got) != 1 || got[0] != ids[0] {
			t.Fatalf("after the restart: incidents %v, want the same %v", got, ids)
		}
		if got := testutil.ToFloat64(second.w.metrics.opened); got != 0 {
			t.Fatalf("the restarted vigil opened %v incidents", got)
		}
		found := false
		for _, e := range second.hook.AllEntries() {
			found = found || strings.Contains(e.Message, "resuming the open incident")
		}
		if !found {
			t.Fatal("resuming the incident was not logged")
		}
	})
}

func TestUnknownOpensAnIncidentOnlyOnceItLasts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil, nil)
		r.engine.set(func(f *fakeEngine) { f.waiting, f.running, f.tokensPerSec = 2, 2, 100 })
		r.start()
		time.Sleep(time.Minute)
		r.engine.set(func(f *fakeEngine) { f.mode = "garbage" })
		time.Sleep(4 * time.Minute)
		if _, inc := r.w.Current(); inc != nil {
			t.Fatalf("an incident opened before unknown lasted unknown_after: %+v", inc)
		}
		time.Sleep(2 * time.Minute)
		r.stop()
		v, inc := r.w.Current()
		if v.State != StateUnknown || !inc.Open() || inc.State != StateUnknown {
			t.Fatalf("after 6 min unknown: %s, %+v", v.State, inc)
		}
		if r.rec.count() != 0 {
			t.Fatal("unknown asked for recovery")
		}
		if got := testutil.ToFloat64(r.w.metrics.scrapeErrors); got < 20 {
			t.Fatalf("scrape errors counted %v", got)
		}
	})
}

func TestMisconfiguredPagesAndNeverRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil, nil)
		r.engine.set(func(f *fakeEngine) { f.mode = "unauthorized" })
		r.start()
		time.Sleep(10 * time.Minute)
		r.stop()
		v, inc := r.w.Current()
		if v.State != StateMisconfigured || !inc.Open() {
			t.Fatalf("%s %+v", v.State, inc)
		}
		if r.rec.count() != 0 {
			t.Fatal("a 401 asked for a restart")
		}
	})
}

func TestAnEngineNeverSeenReadyWhenVigilStartsIsLoadingNotDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil, nil)
		r.engine.set(func(f *fakeEngine) { f.mode = "down" })
		r.start()
		time.Sleep(9 * time.Minute)
		if v, _ := r.w.Current(); v.State != StateLoading || r.rec.count() != 0 {
			t.Fatalf("9 min after boot: %s, %d recoveries", v.State, r.rec.count())
		}
		time.Sleep(2 * time.Minute)
		r.stop()
		if v, _ := r.w.Current(); v.State != StateDown || r.rec.count() != 1 {
			t.Fatalf("past the grace: %s, %d recoveries", v.State, r.rec.count())
		}
	})
}

func TestLoadingAfterARestartNeverRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil, nil)
		r.rec.lastRestart = time.Now()
		r.engine.set(func(f *fakeEngine) { f.mode = "down" })
		r.start()
		time.Sleep(5 * time.Minute)
		if v, _ := r.w.Current(); v.State != StateLoading || r.rec.count() != 0 {
			t.Fatalf("5 min into a 10 min grace: %s, %d recoveries", v.State, r.rec.count())
		}
		r.engine.set(func(f *fakeEngine) { f.mode = "serving" })
		time.Sleep(time.Minute)
		r.stop()
		if v, inc := r.w.Current(); v.State != StateHealthy || inc != nil {
			t.Fatalf("after loading: %s %+v", v.State, inc)
		}
	})
}

func TestVerdictChangesLogAtInfoOrWarnAndSteadyStatesAtDebug(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil, nil)
		r.engine.set(func(f *fakeEngine) { f.waiting, f.running, f.tokensPerSec = 1, 1, 100 })
		r.start()
		time.Sleep(2 * time.Minute)
		r.engine.set(func(f *fakeEngine) { f.waiting = 50 })
		time.Sleep(2 * time.Minute)
		r.stop()

		var changes, steady, missing int
		for _, e := range r.hook.AllEntries() {
			if strings.Contains(e.Message, "metrics missing") {
				missing++
				continue
			}
			if _, ok := e.Data["state"]; !ok {
				continue
			}
			want := []string{"waiting", "running", "tokens_per_second", "since_progress_seconds", "probe"}
			if strings.Contains(e.Message, "first readable scrape") {
				// One scrape gives the queue, not yet a rate: left out,
				// not logged as 0.
				want = []string{"waiting", "running", "probe"}
				for _, k := range []string{"tokens_per_second", "since_progress_seconds"} {
					if v, ok := e.Data[k]; ok {
						t.Errorf("log line %q gives %s %v from one scrape", e.Message, k, v)
					}
				}
			}
			for _, k := range want {
				if _, ok := e.Data[k]; !ok {
					t.Errorf("log line %q lacks field %s", e.Message, k)
				}
			}
			if e.Level == logrus.DebugLevel {
				steady++
			} else {
				changes++
				if _, ok := e.Data["action"]; !ok {
					t.Errorf("verdict change %q does not say the action", e.Message)
				}
			}
		}
		// unknown (first sample) -> healthy -> saturated (incident opened)
		if changes != 3 || steady < 10 {
			t.Fatalf("%d change lines, %d steady lines", changes, steady)
		}
		if missing != 1 {
			t.Fatalf("missing metric logged %d times, want once", missing)
		}
	})
}

// An hour hung, ten times the history's retention: the sample at which
// the counters last moved is kept, so "no progress for" stays true. At a
// 30 s interval: the hour's length is what is tested, and at the default
// 5 s the state file's history, saved whole every cycle, made this one
// test cost 20 CPU seconds under -race.
func TestALongHangKeepsItsTrueSinceProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil, func(o *Options) { o.Recoverer = nil; o.Watchdog.Interval = 30 * time.Second })
		r.engine.set(func(f *fakeEngine) { f.waiting, f.running, f.tokensPerSec = 3, 3, 100 })
		r.start()
		time.Sleep(time.Minute)
		r.engine.set(func(f *fakeEngine) { f.mode = "hung" })
		time.Sleep(time.Hour + time.Second)
		r.stop()
		v, _ := r.w.Current()
		if v.State != StateHung || v.Evidence.Stalled < 59*time.Minute || v.Evidence.SinceProgress < 59*time.Minute {
			t.Fatalf("after an hour hung: %s, stalled %s, since progress %s", v.State, v.Evidence.Stalled, v.Evidence.SinceProgress)
		}
		if !strings.HasPrefix(v.Reason, "HUNG: no progress for 1h0") {
			t.Fatalf("reason %q", v.Reason)
		}
		r.w.mu.Lock()
		n := len(r.w.history)
		r.w.mu.Unlock()
		if n > maxHistory {
			t.Fatalf("history grew to %d", n)
		}
	})
}

func TestIncidentStateMachine(t *testing.T) {
	t.Parallel()
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	var tr tracker
	step := func(m int, s State, busy bool) (*Incident, bool, bool) {
		return tr.observe(Verdict{State: s, At: at(m)}, busy, 5*time.Minute, 0, "")
	}
	if inc, _, _ := step(0, StateHealthy, false); inc != nil {
		t.Fatal("healthy opened an incident")
	}
	if inc, _, _ := step(1, StateLoading, false); inc != nil {
		t.Fatal("loading opened an incident")
	}
	inc, opened, _ := step(2, StateSaturated, false)
	if !opened || inc.State != StateSaturated || inc.ID != "20260301T030200Z-1" {
		t.Fatalf("saturated: %+v opened=%v", inc, opened)
	}
	inc, opened, _ = step(3, StateHung, false)
	if opened || inc.Peak != StateHung || !inc.Changed.Equal(at(3)) {
		t.Fatalf("hung: %+v", inc)
	}
	inc, _, _ = step(4, StateSaturated, false)
	if inc.Peak != StateHung || inc.State != StateSaturated {
		t.Fatalf("peak fell: %+v", inc)
	}
	if inc, _, resolved := step(5, StateHealthy, true); resolved || !inc.Open() {
		t.Fatalf("resolved while busy: %+v", inc)
	}
	if tr.Last != nil {
		t.Fatalf("a last incident before any resolved: %+v", tr.Last)
	}
	inc, _, resolved := step(6, StateHealthy, false)
	if !resolved || inc.Open() || !inc.Resolved.Equal(at(6)) {
		t.Fatalf("not resolved: %+v", inc)
	}
	inc, opened, _ = step(7, StateDown, false)
	if !opened || inc.ID != "20260301T030700Z-2" {
		t.Fatalf("second incident: %+v", inc)
	}
	// The status page shows the last resolved incident beside the open one.
	if l := tr.Last; l == nil || l.ID != "20260301T030200Z-1" || l.Peak != StateHung || !l.Resolved.Equal(at(6)) {
		t.Fatalf("last incident %+v", l)
	}
}

// A saturation whose queue dips under the threshold now and then (the
// limiter keeps it near there) is one incident: it resolves only after
// the engine has stayed healthy for the calm period. A hung incident
// resolves on its proof, calm period or not.
func TestIncidentResolvesAfterACalmPeriod(t *testing.T) {
	t.Parallel()
	const calm = time.Minute
	type obs struct {
		sec      int
		state    State
		opened   bool
		resolved bool
		id       int // which incident (1, 2...), 0 for none
	}
	cases := []struct {
		name string
		seq  []obs
	}{
		{"saturation flapping every few seconds pages once and resolves a minute after the last dip", []obs{
			{0, StateSaturated, true, false, 1},
			{2, StateHealthy, false, false, 1},
			{4, StateSaturated, false, false, 1},
			{6, StateHealthy, false, false, 1},
			{8, StateSaturated, false, false, 1},
			{10, StateHealthy, false, false, 1},
			{69, StateHealthy, false, false, 1},
			{70, StateHealthy, false, true, 1},
			{72, StateSaturated, true, false, 2},
		}},
		{"unknown inside a calm period restarts it", []obs{
			{0, StateSaturated, true, false, 1},
			{10, StateHealthy, false, false, 1},
			{50, StateUnknown, false, false, 1},
			{60, StateHealthy, false, false, 1},
			{119, StateHealthy, false, false, 1},
			{120, StateHealthy, false, true, 1},
		}},
		{"a hung incident resolves on its first healthy verdict", []obs{
			{0, StateSaturated, true, false, 1},
			{10, StateHung, false, false, 1},
			{20, StateHealthy, false, true, 1},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var tr tracker
			ids := map[string]int{}
			for _, o := range tc.seq {
				at := t0.Add(time.Duration(o.sec) * time.Second)
				inc, opened, resolved := tr.observe(Verdict{State: o.state, At: at}, false, time.Minute, calm, "n")
				if inc == nil {
					t.Fatalf("%ds %s: no incident", o.sec, o.state)
				}
				if _, ok := ids[inc.ID]; !ok {
					ids[inc.ID] = len(ids) + 1
				}
				if opened != o.opened || resolved != o.resolved || ids[inc.ID] != o.id {
					t.Fatalf("%ds %s: opened=%v resolved=%v incident #%d (%s), want %v %v #%d",
						o.sec, o.state, opened, resolved, ids[inc.ID], inc.ID, o.opened, o.resolved, o.id)
				}
				if resolved && !inc.Resolved.Equal(at) {
					t.Fatalf("resolved at %s, want %s", inc.Resolved, at)
				}
				if resolved && o.sec == 70 && !inc.Changed.Equal(t0.Add(10*time.Second)) {
					t.Fatalf("healthy since %s, want the calm's start (10s)", inc.Changed)
				}
				if !resolved && inc.Open() && o.state == StateHealthy && inc.State != StateHealthy {
					t.Fatalf("%ds: calm incident shows %s", o.sec, inc.State)
				}
			}
		})
	}
}

// The limiter is told saturated through a saturation incident's calm
// period, so it holds its cap through the flips, and told it is over when
// the incident resolves.
func TestTheLimiterHearsSaturationUntilTheIncidentResolves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil, func(o *Options) { o.CalmFor = time.Minute })
		r.engine.set(func(f *fakeEngine) { f.waiting, f.running, f.tokensPerSec = 40, 8, 900 })
		r.start()
		time.Sleep(30 * time.Second)
		if now, _ := r.limiter.get(); !now {
			t.Fatal("the limiter was not told the engine is saturated")
		}
		// A few seconds without a counter move under saturation: unknown,
		// a stall short of the window; the limiter stays told.
		r.engine.set(func(f *fakeEngine) { f.mode = "hung" })
		time.Sleep(4 * time.Second)
		if v, _ := r.w.Current(); v.State != StateUnknown {
			t.Fatalf("4 s stalled: %s (%s), want unknown", v.State, v.Reason)
		}
		if now, _ := r.limiter.get(); !now {
			t.Fatal("a stall short of the window flipped the limiter off")
		}
		r.engine.set(func(f *fakeEngine) { f.mode = "serving" })
		time.Sleep(2 * time.Second)
		r.engine.set(func(f *fakeEngine) { f.waiting = 0 })
		time.Sleep(30 * time.Second)
		v, inc := r.w.Current()
		if now, _ := r.limiter.get(); v.State != StateHealthy || !inc.Open() || !now {
			t.Fatalf("30 s calm: verdict %s, incident open %v, limiter saturated %v; want healthy, open, saturated",
				v.State, inc.Open(), now)
		}
		// The calm began within a cycle of the queue emptying: resolved by
		// a minute and a cycle after.
		time.Sleep(45 * time.Second)
		r.stop()
		v, inc = r.w.Current()
		if now, _ := r.limiter.get(); inc.Open() || now {
			t.Fatalf("105 s after the queue emptied: incident open %v, limiter saturated %v; want resolved, not saturated", inc.Open(), now)
		}
	})
}

func TestACycleCutShortByShutdownRecordsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		v := r.w.Cycle(ctx)
		if v.State != StateUnknown || v.Reason != "UNKNOWN: no sample yet" {
			t.Fatalf("verdict %+v", v)
		}
		if len(r.pager.all()) != 0 || len(r.w.history) != 0 {
			t.Fatal("a cancelled cycle was recorded")
		}
	})
}

func TestSetThresholdsAppliesFromTheNextCycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil, nil)
		r.engine.set(func(f *fakeEngine) { f.waiting, f.running, f.tokensPerSec = 40, 8, 900 })
		r.start()
		time.Sleep(time.Minute)
		r.engine.set(func(f *fakeEngine) { f.mode = "hung" })
		time.Sleep(time.Minute + time.Second)
		if v, _ := r.w.Current(); v.State == StateHung {
			t.Fatal("hung before hang_after")
		}
		th := r.w.Thresholds()
		if th.HangAfter != 3*time.Minute || th.SaturatedWaiting != 8 {
			t.Fatalf("thresholds %+v", th)
		}
		th.HangAfter = 45 * time.Second
		r.w.SetThresholds(th)
		time.Sleep(15 * time.Second)
		r.stop()
		if v, _ := r.w.Current(); v.State != StateHung {
			t.Fatalf("after lowering hang_after to 45s a minute into the hang: %s", v.Reason)
		}
	})
}

func TestCapacityAndTheRetryStormNotice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		notices := map[string][]string{}
		conds := &condRecorder{}
		r := newRig(t, nil, func(o *Options) {
			o.MaxInFlight = 32
			o.Notice = func(kind, text string) { mu.Lock(); notices[kind] = append(notices[kind], text); mu.Unlock() }
			o.Conditions = conds
		})
		r.engine.set(func(f *fakeEngine) { f.waiting, f.running, f.tokensPerSec = 2, 8, 2340 })
		r.start()
		time.Sleep(6 * time.Minute)
		c := r.w.Capacity()
		// One completion a second, plus our probe every fast cycle (1 s
		// with work pending), of 12 s each: 24 in flight.
		if !c.InFlightKnown || c.InFlight < 23.9 || c.InFlight > 24.1 || c.MaxInFlight != 32 || c.Window != 5*time.Minute {
			t.Fatalf("capacity %+v", c)
		}
		if c.RetryStorm.Alarm || !c.RetryStorm.Judged {
			t.Fatalf("no storm yet: %+v", c.RetryStorm)
		}
		r.engine.set(func(f *fakeEngine) { f.stormFactor = 10 })
		time.Sleep(6 * time.Minute)
		r.stop()
		if c := r.w.Capacity(); !c.RetryStorm.Alarm {
			t.Fatalf("storm not seen: %+v", c.RetryStorm)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(notices["retry_storm"]) != 1 || !strings.HasPrefix(notices["retry_storm"][0], "RETRY STORM: over 5m00s") {
			t.Fatalf("retry-storm notices %q", notices["retry_storm"])
		}
		// A missing metric is a standing condition, told every cycle; the
		// pager decides when it has lasted long enough to page.
		if len(notices["metrics_missing"]) != 0 {
			t.Errorf("missing metrics told as a notice: %q", notices["metrics_missing"])
		}
		cycles, missing := conds.count("metrics_missing")
		if cycles < 40 || missing < cycles-2 || !strings.Contains(conds.last()["metrics_missing"], "vllm:prefix_cache_queries_total") {
			t.Fatalf("metrics_missing in %d of %d cycles' conditions; last %q", missing, cycles, conds.last())
		}
	})
}

// Issue #16: vigil restarted while the engine is still hung and idle. The
// new vigil's first sample has no probe yet and the frozen gauges read
// 0/0, which looks idle; that is no evidence of health, so the incident
// stays open (no RESOLVED, no new incident) until the engine shows it
// serves, and the hang is found again.
func TestVigilRestartedOnAHungIdleEngineDoesNotResolveFromFrozenGauges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	synctest.Test(t, func(t *testing.T) {
		store, err := state.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		first := newRig(t, store, nil)
		first.rec.busyFor = 0 // the recoverer never restarts this engine
		first.start()
		time.Sleep(time.Minute) // idle and serving: probes complete
		first.engine.set(func(f *fakeEngine) { f.mode = "hung" })
		time.Sleep(4 * time.Minute)
		first.stop()
		if first.firstAt(StateHung).IsZero() {
			t.Fatal("the first vigil never saw the idle hang")
		}
		ids := first.incidentIDs()

		// A fresh vigil has no probe in flight.
		first.engine.set(func(f *fakeEngine) {
			f.probeRunning = false
			f.probe = probes.CompletionStatus{State: probes.ProbeIdle}
		})
		reopened, err := state.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		second := newRig(t, reopened, nil)
		second.rec.busyFor = 0
		second.engine = first.engine
		second.w.probes = first.engine
		second.start()
		time.Sleep(4 * time.Minute)
		second.stop()

		for _, p := range second.pager.all() {
			if p.v.State == StateHealthy || (p.inc != nil && !p.inc.Open()) {
				t.Fatalf("resolved from a frozen idle sample at %s: %s (%s)", p.v.At.Format(time.TimeOnly), p.v.State, p.v.Reason)
			}
		}
		if got := second.incidentIDs(); len(got) != 1 || got[0] != ids[0] {
			t.Fatalf("incidents after the restart %v, want the same one %v", got, ids)
		}
		if second.firstAt(StateHung).IsZero() {
			t.Fatal("the restarted vigil never found the hang again")
		}

		// The engine comes back: a probe completes, the incident resolves.
		first.engine.set(func(f *fakeEngine) { f.mode = "serving" })
		second.start()
		time.Sleep(3 * time.Minute)
		second.stop()
		resolved := false
		for _, p := range second.pager.all() {
			resolved = resolved || (p.inc != nil && !p.inc.Open())
		}
		if !resolved {
			t.Fatal("the incident never resolved once the engine served again")
		}
	})
}

// Issue #16: vigil's own restart of the engine was paged as a new
// "HUNG → DOWN". While the recoverer is busy the watchdog marks its
// verdicts Recovering, and a DOWN never becomes the incident's state.
func TestADownWhileVigilRecoversIsMarkedAndNeverTheIncidentsState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil, nil)
		r.engine.set(func(f *fakeEngine) { f.waiting, f.running, f.tokensPerSec = 40, 8, 900 })
		r.start()
		time.Sleep(2 * time.Minute)
		r.engine.set(func(f *fakeEngine) { f.mode = "hung" })
		time.Sleep(4 * time.Minute) // hung; recovery asked, busy for 10 min
		r.engine.set(func(f *fakeEngine) { f.mode = "down" })
		time.Sleep(time.Minute)
		r.stop()
		if r.rec.count() != 1 {
			t.Fatalf("recoveries %d, want 1", r.rec.count())
		}
		downs := 0
		for _, p := range r.pager.all() {
			if p.v.State != StateDown {
				continue
			}
			downs++
			if !p.v.Recovering || p.inc == nil || p.inc.State == StateDown {
				t.Fatalf("a down verdict during vigil's recovery: recovering %t, incident %+v", p.v.Recovering, p.inc)
			}
		}
		if downs == 0 {
			t.Fatal("the engine was never seen down")
		}
	})
}

// condRecorder records every cycle's conditions.
type condRecorder struct {
	mu         sync.Mutex
	cycles     []map[string]string
	recovering []bool
}

func (c *condRecorder) Conditions(_ time.Time, current map[string]string, recovering bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cycles = append(c.cycles, current)
	c.recovering = append(c.recovering, recovering)
}

// recoveringCycles counts the cycles told as vigil's own recovery.
func (c *condRecorder) recoveringCycles() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.recovering {
		if r {
			n++
		}
	}
	return n
}

// count is how many cycles were told, and in how many topic was present.
func (c *condRecorder) count(topic string) (cycles, present int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.cycles {
		if _, ok := m[topic]; ok {
			present++
		}
	}
	return len(c.cycles), present
}

func (c *condRecorder) last() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cycles) == 0 {
		return nil
	}
	return c.cycles[len(c.cycles)-1]
}

// What the probes see while vigil restarts the engine (a refused
// /v1/models) is vigil's doing: the pager is told those cycles are the
// recovery's, so it never pages them as odd.
func TestConditionsDuringVigilsOwnRecoveryAreMarked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conds := &condRecorder{}
		r := newRig(t, nil, func(o *Options) { o.Conditions = conds })
		r.engine.set(func(f *fakeEngine) { f.waiting, f.running, f.tokensPerSec = 40, 8, 900 })
		r.start()
		time.Sleep(2 * time.Minute)
		if n := conds.recoveringCycles(); n != 0 {
			t.Fatalf("%d cycles told as recovering before any recovery", n)
		}
		r.engine.set(func(f *fakeEngine) { f.mode = "hung" })
		time.Sleep(5 * time.Minute) // hung after hang_after, then the recoverer is busy for 10m
		r.stop()
		if r.rec.count() != 1 {
			t.Fatalf("recoveries asked %d, want 1", r.rec.count())
		}
		cycles, _ := conds.count("")
		if n := conds.recoveringCycles(); n < 4 || n >= cycles {
			t.Fatalf("%d of %d cycles told as recovering, want those after the recovery began", n, cycles)
		}
	})
}

// The cycle runs every interval on an idle engine, every fastCycle while
// work is pending, and at the interval again once the verdict is hung.
func TestTheCycleIsFastOnlyWhileWorkIsPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil, nil)
		iv := configs.Default().Watchdog.Interval
		count := func(d time.Duration) int {
			r.mu.Lock()
			before := r.cycles
			r.mu.Unlock()
			time.Sleep(d)
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.cycles - before
		}
		r.start()
		// Counted between cycles, never on one: a cycle due at the
		// instant a count begins or ends wakes with it, in either order.
		time.Sleep(iv / 2)
		if n := count(time.Minute); n != int(time.Minute/iv) {
			t.Fatalf("idle: %d cycles in a minute, want %d (every %s)", n, time.Minute/iv, iv)
		}
		// vigil's own probe out at every sample is no work to watch.
		r.engine.set(func(f *fakeEngine) { f.probeLatency = 7 * time.Second })
		if n := count(time.Minute); n != int(time.Minute/iv) {
			t.Fatalf("idle, the probe out: %d cycles in a minute, want %d (every %s)", n, time.Minute/iv, iv)
		}
		r.engine.set(func(f *fakeEngine) {
			f.waiting, f.running, f.tokensPerSec, f.probeLatency = 2, 8, 900, 50*time.Millisecond
		})
		time.Sleep(iv) // the first cycle that sees the work
		if n := count(time.Minute); n != int(time.Minute/fastCycle(iv)) {
			t.Fatalf("work pending: %d cycles in a minute, want %d (every %s)", n, time.Minute/fastCycle(iv), fastCycle(iv))
		}
		r.engine.set(func(f *fakeEngine) { f.mode = "hung" })
		time.Sleep(4 * time.Minute) // hung at the fixed 3m window
		if v, _ := r.w.Current(); v.State != StateHung {
			t.Fatalf("after 4 minutes frozen: %s", v.State)
		}
		if n := count(time.Minute); n != int(time.Minute/iv) {
			t.Fatalf("hung: %d cycles in a minute, want %d (every %s)", n, time.Minute/iv, iv)
		}
		r.stop()
	})
}
