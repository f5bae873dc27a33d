package overrides

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/state"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// settings stands in for the limiter and watchdog: live values by key.
type settings struct {
	mu      sync.Mutex
	values  map[string]string
	sets    []string // "key=value", in order
	failSet map[string]error
}

func newSettings() *settings {
	return &settings{values: map[string]string{
		"admission.max_in_flight":    "32",
		"watchdog.saturated_waiting": "64",
		"watchdog.hang_after":        "3m0s",
	}, failSet: map[string]error{}}
}

func (s *settings) Get(key string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.values[key]
	if !ok {
		return "", fmt.Errorf("unknown key %s", key)
	}
	return v, nil
}

func (s *settings) Set(key, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.failSet[key]; err != nil {
		return err
	}
	s.values[key] = value
	s.sets = append(s.sets, key+"="+value)
	return nil
}

func (s *settings) value(key string) string {
	v, _ := s.Get(key)
	return v
}

func (s *settings) fail(key string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failSet[key] = err
}

// pages records notices like the pager would receive them.
type pages struct {
	mu    sync.Mutex
	kinds []string
	texts []string
}

func (p *pages) Notice(kind, text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kinds = append(p.kinds, kind)
	p.texts = append(p.texts, text)
}

func (p *pages) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, len(p.texts))
	for i := range p.texts {
		out[i] = p.kinds[i] + ": " + p.texts[i]
	}
	return out
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

type rig struct {
	m     *Manager
	live  *settings
	pages *pages
	clock *clock
	logs  *logtest.Hook
	reg   *prometheus.Registry
	store *state.Store
}

func newRig(t *testing.T, store *state.Store, live *settings, at time.Time) *rig {
	t.Helper()
	logger, hook := logtest.NewNullLogger()
	logger.SetLevel(logrus.DebugLevel)
	r := &rig{live: live, pages: &pages{}, clock: &clock{t: at}, logs: hook, reg: prometheus.NewRegistry(), store: store}
	m, err := New(Options{
		Applier: live, Notifier: r.pages, Store: store, Now: r.clock.Now,
		Log: logrus.NewEntry(logger), Registerer: r.reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.m = m
	return r
}

func lift(value string, until time.Time, reason string) configs.Override {
	return configs.Override{Key: "admission.max_in_flight", Value: value, Until: until, Reason: reason}
}

func wantPages(t *testing.T, p *pages, want ...string) {
	t.Helper()
	got := p.all()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("pages:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestOverridesThatBreakTheRulesAreRefused(t *testing.T) {
	cases := []struct {
		name string
		o    configs.Override
		want string
	}{
		{"an override without until is refused", lift("64", time.Time{}, "load test"), "until is required"},
		{"an override without a reason is refused", lift("64", t0.Add(time.Hour), ""), "reason is required"},
		{"an override beyond a week is refused", lift("64", t0.Add(configs.MaxOverride+time.Minute), "load test"), "more than"},
		{"an override already in the past is refused", lift("64", t0.Add(-time.Minute), "load test"), "in the past"},
		{"a key that cannot be overridden is refused",
			configs.Override{Key: "engine.url", Value: "http://x", Until: t0.Add(time.Hour), Reason: "r"}, "cannot be overridden"},
		{"a value that is not a number is refused, naming the key", lift("64x", t0.Add(time.Hour), "load test"),
			`value "64x" for admission.max_in_flight: want an integer >= 0`},
		{"a duration key wants a duration",
			configs.Override{Key: "watchdog.hang_after", Value: "5 minutes", Until: t0.Add(time.Hour), Reason: "r"}, "want a positive duration"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, state.Memory(), newSettings(), t0)
			err := r.m.Set(tc.o)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Set = %v, want ErrInvalid mentioning %q", err, tc.want)
			}
			if len(r.live.sets) != 0 || len(r.m.List()) != 0 || len(r.pages.all()) != 0 {
				t.Fatalf("a refused override changed something: sets=%v list=%v pages=%v", r.live.sets, r.m.List(), r.pages.all())
			}
		})
	}
}

func TestALiftedLimitIsRestoredAtExpiryWithOneReminder(t *testing.T) {
	r := newRig(t, state.Memory(), newSettings(), t0)
	until := t0.Add(3 * time.Hour)
	if err := r.m.Set(lift("64", until, "load test for tenant acme")); err != nil {
		t.Fatal(err)
	}
	if got := r.live.value("admission.max_in_flight"); got != "64" {
		t.Fatalf("live max_in_flight = %s, want 64", got)
	}
	if l := r.m.List(); len(l) != 1 || l[0].Replaced != "32" || l[0].Source != SourceAPI {
		t.Fatalf("List = %+v, want one override replacing 32", l)
	}
	if got := testutil.ToFloat64(r.m.activeGauge); got != 1 {
		t.Fatalf("vigil_overrides_active = %v, want 1", got)
	}

	steps := []struct {
		at   time.Duration
		live string
	}{
		{time.Hour, "64"},                    // nothing yet
		{2*time.Hour + time.Minute, "64"},    // reminder: 59m left
		{2*time.Hour + 30*time.Minute, "64"}, // no second reminder
		{3*time.Hour - time.Second, "64"},    // not yet
		{3 * time.Hour, "32"},                // expired: restored
		{3*time.Hour + 10*time.Minute, "32"}, // nothing left to do
	}
	for _, s := range steps {
		r.m.Tick(t0.Add(s.at))
		if got := r.live.value("admission.max_in_flight"); got != s.live {
			t.Fatalf("at +%s live max_in_flight = %s, want %s", s.at, got, s.live)
		}
	}
	wantPages(t, r.pages,
		"override_started: override started: admission.max_in_flight 32 → 64 until 2025-06-01T15:00:00Z (load test for tenant acme)",
		"override_reminder: override ends in 59m: admission.max_in_flight 64 → 32 at 2025-06-01T15:00:00Z (load test for tenant acme); set a new override before then to keep it",
		"override_expired: override expired: admission.max_in_flight restored 64 → 32 (load test for tenant acme)",
	)
	if len(r.m.List()) != 0 {
		t.Fatalf("List after expiry = %+v, want empty", r.m.List())
	}
	if got := testutil.ToFloat64(r.m.expired); got != 1 {
		t.Fatalf("vigil_overrides_expired_total = %v, want 1", got)
	}
	if got := testutil.ToFloat64(r.m.activeGauge); got != 0 {
		t.Fatalf("vigil_overrides_active = %v, want 0", got)
	}
	if n, err := testutil.GatherAndCount(r.reg, "vigil_overrides_active", "vigil_overrides_expired_total"); err != nil || n != 2 {
		t.Fatalf("registered metrics = %d, %v; want both", n, err)
	}

	var restored *logrus.Entry
	for _, e := range r.logs.AllEntries() {
		if e.Message == "override expired; restored" {
			restored = e
		}
	}
	if restored == nil {
		t.Fatal("no log line for the restore")
	}
	for k, want := range map[string]any{"key": "admission.max_in_flight", "restored": "32", "was": "64", "reason": "load test for tenant acme"} {
		if restored.Data[k] != want {
			t.Errorf("restore log field %s = %v, want %v", k, restored.Data[k], want)
		}
	}
}

func TestASecondOverrideOnTheSameKeyKeepsTheOriginalValue(t *testing.T) {
	r := newRig(t, state.Memory(), newSettings(), t0)
	if err := r.m.Set(lift("64", t0.Add(2*time.Hour), "load test")); err != nil {
		t.Fatal(err)
	}
	r.clock.Set(t0.Add(time.Hour))
	if err := r.m.Set(lift("128", t0.Add(5*time.Hour), "bigger load test")); err != nil {
		t.Fatal(err)
	}
	r.m.Tick(t0.Add(2 * time.Hour)) // the first until has passed: nothing happens
	if got := r.live.value("admission.max_in_flight"); got != "128" {
		t.Fatalf("live = %s after the first override's until, want 128 (replaced by the second)", got)
	}
	r.m.Tick(t0.Add(4 * time.Hour)) // an hour left: the new until gets its own reminder
	r.m.Tick(t0.Add(5 * time.Hour))
	if got := r.live.value("admission.max_in_flight"); got != "32" {
		t.Fatalf("live after expiry = %s, want the original 32", got)
	}
	wantPages(t, r.pages,
		"override_started: override started: admission.max_in_flight 32 → 64 until 2025-06-01T14:00:00Z (load test)",
		"override_updated: override updated: admission.max_in_flight 64 → 128 until 2025-06-01T17:00:00Z (bigger load test); 32 is restored at expiry",
		"override_reminder: override ends in 1h: admission.max_in_flight 128 → 32 at 2025-06-01T17:00:00Z (bigger load test); set a new override before then to keep it",
		"override_expired: override expired: admission.max_in_flight restored 128 → 32 (bigger load test)",
	)
}

func TestClearRestoresEarly(t *testing.T) {
	r := newRig(t, state.Memory(), newSettings(), t0)
	if err := r.m.Set(lift("64", t0.Add(30*time.Minute), "quick test")); err != nil {
		t.Fatal(err)
	}
	a, err := r.m.Clear("admission.max_in_flight")
	if err != nil || a.Value != "64" || a.Replaced != "32" {
		t.Fatalf("Clear = %+v, %v", a, err)
	}
	if got := r.live.value("admission.max_in_flight"); got != "32" {
		t.Fatalf("live after Clear = %s, want 32", got)
	}
	if _, err := r.m.Clear("admission.max_in_flight"); !errors.Is(err, ErrNotActive) {
		t.Fatalf("second Clear = %v, want ErrNotActive", err)
	}
	r.m.Tick(t0.Add(time.Hour))
	// A 30-minute override is too short to need a reminder.
	wantPages(t, r.pages,
		"override_started: override started: admission.max_in_flight 32 → 64 until 2025-06-01T12:30:00Z (quick test)",
		"override_cleared: override cleared early: admission.max_in_flight restored 64 → 32 (quick test)",
	)
}

func TestAFailedRestoreIsPagedOnceAndRetried(t *testing.T) {
	r := newRig(t, state.Memory(), newSettings(), t0)
	if err := r.m.Set(lift("64", t0.Add(30*time.Minute), "load test")); err != nil {
		t.Fatal(err)
	}
	r.live.fail("admission.max_in_flight", errors.New("limiter not ready"))
	r.m.Tick(t0.Add(31 * time.Minute))
	r.m.Tick(t0.Add(32 * time.Minute))
	if len(r.m.List()) != 1 {
		t.Fatal("an override whose restore failed was forgotten")
	}
	r.live.fail("admission.max_in_flight", nil)
	r.m.Tick(t0.Add(33 * time.Minute))
	if got := r.live.value("admission.max_in_flight"); got != "32" {
		t.Fatalf("live after the retry = %s, want 32", got)
	}
	wantPages(t, r.pages,
		"override_started: override started: admission.max_in_flight 32 → 64 until 2025-06-01T12:30:00Z (load test)",
		"override_restore_failed: override expired but restoring admission.max_in_flight to 32 failed: limiter not ready; 64 stays in effect, retrying every minute",
		"override_expired: override expired: admission.max_in_flight restored 64 → 32 (load test)",
	)
}

func TestAnOverrideTheApplierRefusesLeavesNoTrace(t *testing.T) {
	store := state.Memory()
	r := newRig(t, store, newSettings(), t0)
	r.live.fail("admission.max_in_flight", fmt.Errorf("%w: over the engine's max_num_seqs", ErrInvalid))
	err := r.m.Set(lift("4096", t0.Add(time.Hour), "load test"))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "apply admission.max_in_flight=4096") {
		t.Fatalf("Set = %v, want the Applier's refusal, still ErrInvalid", err)
	}
	var p persisted
	store.Load(StateSection, &p)
	if len(r.m.List()) != 0 || len(p.Active) != 0 || len(r.pages.all()) != 0 {
		t.Fatalf("refused override left list=%v journal=%v pages=%v", r.m.List(), p.Active, r.pages.all())
	}
}

func TestOverridesSurviveVigilsRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	open := func() *state.Store {
		s, err := state.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	live := newSettings()
	first := newRig(t, open(), live, t0)
	if err := first.m.Set(lift("64", t0.Add(4*time.Hour), "load test")); err != nil {
		t.Fatal(err)
	}
	if err := first.m.Set(configs.Override{Key: "watchdog.saturated_waiting", Value: "256", Until: t0.Add(time.Hour), Reason: "burst"}); err != nil {
		t.Fatal(err)
	}

	t.Run("an override that expired while vigil was down is restored at startup", func(t *testing.T) {
		// The Applier still holds the overridden values (same live settings).
		second := newRig(t, open(), live, t0.Add(2*time.Hour))
		if err := second.m.Resume(nil); err != nil {
			t.Fatal(err)
		}
		if got := live.value("watchdog.saturated_waiting"); got != "64" {
			t.Fatalf("max_queue after startup = %s, want 64 restored", got)
		}
		if got := live.value("admission.max_in_flight"); got != "64" {
			t.Fatalf("max_in_flight after startup = %s, want the override 64 still in effect", got)
		}
		wantPages(t, second.pages,
			"override_expired: override expired while vigil was down (at 2025-06-01T13:00:00Z): watchdog.saturated_waiting restored 256 → 64 (burst)")
		second.m.Tick(t0.Add(4 * time.Hour))
		if got := live.value("admission.max_in_flight"); got != "32" {
			t.Fatalf("max_in_flight at expiry after a restart = %s, want 32", got)
		}
		if got := testutil.ToFloat64(second.m.expired); got != 2 {
			t.Fatalf("vigil_overrides_expired_total = %v, want 2", got)
		}
	})
}

func TestARestartedVigilPutsTheOverrideBackInEffect(t *testing.T) {
	cases := []struct {
		name        string
		configBase  string // max_in_flight the restarted vigil starts with
		wantRestore string
	}{
		{"the override is re-applied and the journaled value restored at expiry", "32", "32"},
		{"an edited config's value is what expiry restores", "48", "48"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := state.Memory()
			first := newRig(t, store, newSettings(), t0)
			if err := first.m.Set(lift("64", t0.Add(2*time.Hour), "load test")); err != nil {
				t.Fatal(err)
			}
			// vigil restarts: the limiter comes up from the config file.
			fresh := newSettings()
			fresh.values["admission.max_in_flight"] = tc.configBase
			second := newRig(t, store, fresh, t0.Add(time.Hour))
			if err := second.m.Resume(nil); err != nil {
				t.Fatal(err)
			}
			if got := fresh.value("admission.max_in_flight"); got != "64" {
				t.Fatalf("after restart live = %s, want the override 64 back", got)
			}
			second.m.Tick(t0.Add(2 * time.Hour))
			if got := fresh.value("admission.max_in_flight"); got != tc.wantRestore {
				t.Fatalf("at expiry live = %s, want %s", got, tc.wantRestore)
			}
		})
	}
}

func TestAnOverrideThatExpiredWhileDownAndWasResetByTheRestartIsOnlyPaged(t *testing.T) {
	store := state.Memory()
	first := newRig(t, store, newSettings(), t0)
	if err := first.m.Set(lift("64", t0.Add(time.Hour), "load test")); err != nil {
		t.Fatal(err)
	}
	fresh := newSettings() // back at the configured 32
	second := newRig(t, store, fresh, t0.Add(3*time.Hour))
	if err := second.m.Resume(nil); err != nil {
		t.Fatal(err)
	}
	if len(fresh.sets) != 0 {
		t.Fatalf("sets = %v, want none: the restart already reset the value", fresh.sets)
	}
	wantPages(t, second.pages,
		"override_expired: override expired while vigil was down (at 2025-06-01T13:00:00Z): admission.max_in_flight 64 is no longer in effect, live value 32 (load test)")
	if len(second.m.List()) != 0 {
		t.Fatalf("List = %+v, want empty", second.m.List())
	}
}

func TestConfigFileOverridesAtStartup(t *testing.T) {
	store := state.Memory()
	configured := []configs.Override{
		lift("64", t0.Add(2*time.Hour), "migration week"),
		{Key: "watchdog.saturated_waiting", Value: "128", Until: t0.Add(-time.Hour), Reason: "old"},
	}
	live := newSettings()
	first := newRig(t, store, live, t0)
	if err := first.m.Resume(configured); err != nil {
		t.Fatal(err)
	}
	if got := live.value("admission.max_in_flight"); got != "64" {
		t.Fatalf("max_in_flight = %s, want 64 from the config file", got)
	}
	if got := live.value("watchdog.saturated_waiting"); got != "64" {
		t.Fatalf("max_queue = %s: an expired config override was applied", got)
	}
	wantPages(t, first.pages,
		"override_started: override started: admission.max_in_flight 32 → 64 until 2025-06-01T14:00:00Z (migration week)")

	t.Run("restarting with the same config file pages nothing new", func(t *testing.T) {
		again := newRig(t, store, live, t0.Add(10*time.Minute))
		if err := again.m.Resume(configured); err != nil {
			t.Fatal(err)
		}
		wantPages(t, again.pages)
	})

	t.Run("a config override cleared early stays cleared across a restart", func(t *testing.T) {
		r := newRig(t, store, live, t0.Add(20*time.Minute))
		if _, err := r.m.Clear("admission.max_in_flight"); err != nil {
			t.Fatal(err)
		}
		after := newRig(t, store, live, t0.Add(30*time.Minute))
		if err := after.m.Resume(configured); err != nil {
			t.Fatal(err)
		}
		if got := live.value("admission.max_in_flight"); got != "32" {
			t.Fatalf("max_in_flight = %s, want 32: a cleared config override came back", got)
		}
	})

	t.Run("a config override without a reason is an error and the rest still applies", func(t *testing.T) {
		r := newRig(t, state.Memory(), newSettings(), t0)
		err := r.m.Resume([]configs.Override{
			{Key: "watchdog.saturated_waiting", Value: "128", Until: t0.Add(time.Hour)},
			{Key: "watchdog.hang_after", Value: "10m", Until: t0.Add(time.Hour), Reason: "long prefills today"},
		})
		if err == nil || !strings.Contains(err.Error(), "config override watchdog.saturated_waiting") || !strings.Contains(err.Error(), "reason is required") {
			t.Fatalf("Resume = %v, want an error naming the key and the rule", err)
		}
		if got := r.live.value("watchdog.hang_after"); got != "10m" {
			t.Fatalf("hang_after = %s, want 10m applied despite the other error", got)
		}
	})
}

func TestTheExpiryJobIsScheduledWithCron(t *testing.T) {
	r := newRig(t, state.Memory(), newSettings(), t0)
	entries := r.m.cron.Entries()
	if len(entries) != 1 {
		t.Fatalf("cron entries = %d, want the one expiry job", len(entries))
	}
	if loc := r.m.cron.Location(); loc != time.UTC {
		t.Fatalf("cron location = %v, want UTC", loc)
	}
	// The schedule fires every minute.
	first := entries[0].Schedule.Next(t0)
	if d := entries[0].Schedule.Next(first).Sub(first); d != time.Minute {
		t.Fatalf("schedule period = %v, want 1m", d)
	}
}

func TestTheRealCronRestoresAnExpiredOverride(t *testing.T) {
	logger, _ := logtest.NewNullLogger()
	live, clk := newSettings(), &clock{t: t0}
	m, err := New(Options{Applier: live, Now: clk.Now, Log: logrus.NewEntry(logger), Schedule: "@every 1s"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Set(lift("64", t0.Add(time.Hour), "load test")); err != nil {
		t.Fatal(err)
	}
	clk.Set(t0.Add(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for live.value("admission.max_in_flight") != "32" {
		if time.Now().After(deadline) {
			cancel()
			t.Fatal("cron did not restore the expired override within 5s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
}

func TestANewConfiguredValueWaitsBehindAnOverride(t *testing.T) {
	cases := []struct {
		name      string
		override  bool   // an override holds admission.max_in_flight
		wantLive  string // right after SetConfigured
		wantAfter string // after the override's expiry
	}{
		{"no override: the new value is live at once", false, "48", "48"},
		{"an override holds the key: it stays, the new value comes back at its expiry", true, "64", "48"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, state.Memory(), newSettings(), t0)
			until := t0.Add(2 * time.Hour)
			if tc.override {
				if err := r.m.Set(lift("64", until, "load test")); err != nil {
					t.Fatal(err)
				}
			}
			a, held, err := r.m.SetConfigured("admission.max_in_flight", "48")
			if err != nil || held != tc.override {
				t.Fatalf("SetConfigured = %+v, %v, %v", a, held, err)
			}
			if got := r.live.value("admission.max_in_flight"); got != tc.wantLive {
				t.Fatalf("live after the new configured value = %s, want %s", got, tc.wantLive)
			}
			if tc.override && (len(r.m.List()) != 1 || r.m.List()[0].Replaced != "48") {
				t.Fatalf("the override must stay listed, restoring 48: %+v", r.m.List())
			}
			r.m.Tick(until)
			if got := r.live.value("admission.max_in_flight"); got != tc.wantAfter {
				t.Fatalf("live after expiry = %s, want %s", got, tc.wantAfter)
			}
		})
	}
}

func TestApplyConfiguredAppliesNewFileOverridesAndRefusesBadOnes(t *testing.T) {
	r := newRig(t, state.Memory(), newSettings(), t0)
	good := configs.Override{Key: "watchdog.hang_after", Value: "5m", Until: t0.Add(time.Hour), Reason: "long prefills OPS-7"}
	bad := configs.Override{Key: "watchdog.saturated_waiting", Value: "0", Until: t0.Add(time.Hour), Reason: "r"}
	err := r.m.ApplyConfigured([]configs.Override{good, bad})
	if err == nil || !strings.Contains(err.Error(), "watchdog.saturated_waiting=0") || !strings.Contains(err.Error(), "want an integer >= 1") {
		t.Fatalf("ApplyConfigured = %v, want the bad one refused with its reason", err)
	}
	if got := r.live.value("watchdog.hang_after"); got != "5m" {
		t.Fatalf("hang_after = %s, want the file's override 5m", got)
	}
	l := r.m.List()
	if len(l) != 1 || l[0].Source != SourceConfig || l[0].Replaced != "3m0s" {
		t.Fatalf("List = %+v", l)
	}
	// Applying the same file again changes nothing and pages nothing.
	n := len(r.pages.all())
	if err := r.m.ApplyConfigured([]configs.Override{good}); err != nil || len(r.pages.all()) != n {
		t.Fatalf("a second apply of the same override: %v, pages %v", err, r.pages.all())
	}
}
