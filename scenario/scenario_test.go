package scenario_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/watchdog"
)

// Wall-clock settings for every scenario: a 100 ms interval and a 1.2 s
// hang_after stand for 15 s and 3 min.
const (
	interval     = 100 * time.Millisecond
	hangAfter    = 1200 * time.Millisecond
	probeTimeout = 500 * time.Millisecond
	probeSLO     = 250 * time.Millisecond
)

// recorder is the pager, the recoverer and the limiter at once: it keeps
// every verdict, every recovery asked for, and what the limiter was told.
type recorder struct {
	mu        sync.Mutex
	verdicts  []watchdog.Verdict
	recovers  int
	saturated bool
	busy      bool
	restarted time.Time
}

func (r *recorder) Observe(v watchdog.Verdict, _ *watchdog.Incident) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.verdicts = append(r.verdicts, v)
}

func (r *recorder) Recover(context.Context, watchdog.Incident, watchdog.Verdict) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recovers++
	r.busy = true // a recovery would take longer than any scenario
}

func (r *recorder) Busy() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.busy
}

func (r *recorder) LastRestart() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restarted
}

func (r *recorder) SetSaturated(b bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.saturated = b
}

func (r *recorder) all() []watchdog.Verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]watchdog.Verdict(nil), r.verdicts...)
}

func (r *recorder) recoveries() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.recovers
}

// first is the first verdict in state s at or after from (nil if none).
func (r *recorder) first(s watchdog.State, from time.Time) *watchdog.Verdict {
	for _, v := range r.all() {
		if v.State == s && !v.At.Before(from) {
			return &v
		}
	}
	return nil
}

// never fails the test if any verdict was in one of states.
func (r *recorder) never(t *testing.T, states ...watchdog.State) {
	t.Helper()
	for _, v := range r.all() {
		for _, s := range states {
			if v.State == s {
				t.Fatalf("verdict %s at %s: %s", v.State, v.At.Format("15:04:05.000"), v.Reason)
			}
		}
	}
}

func (r *recorder) last() watchdog.Verdict {
	all := r.all()
	if len(all) == 0 {
		return watchdog.Verdict{}
	}
	return all[len(all)-1]
}

// watch runs a watchdog with real probes against url until the test ends.
func watch(t *testing.T, url, apiKey string, tweak func(*watchdog.Options)) *recorder {
	t.Helper()
	cfg := configs.Default()
	cfg.Engine.URL = url
	cfg.Engine.APIKey = configs.Secret(apiKey)
	cfg.Engine.RequestTimeout = 400 * time.Millisecond
	cfg.Watchdog.Interval = interval
	cfg.Watchdog.HangAfter = configs.Fixed(hangAfter)
	cfg.Watchdog.ProbeTimeout = probeTimeout
	cfg.Watchdog.ProbeSLO = probeSLO
	cfg.Watchdog.StartupGrace = 5 * time.Second
	rec := &recorder{}
	log := logrus.New()
	log.SetOutput(io.Discard)
	opts := watchdog.Options{
		Engine: cfg.Engine, Watchdog: cfg.Watchdog, UnknownAfter: time.Second, Node: t.Name(),
		Pager: rec, Recoverer: rec, Limiter: rec, Log: logrus.NewEntry(log),
	}
	if tweak != nil {
		tweak(&opts)
	}
	w, err := watchdog.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return rec
}

// engineConfig is a small, fast engine: 4 sequences at a time, 20x time.
func engineConfig() enginesim.Config {
	c := enginesim.DefaultConfig()
	c.Model = "sim"
	c.MaxNumSeqs = 4
	c.Scale = 20
	return c
}

// serve runs an engine behind an httptest server; override, when set,
// answers /metrics instead of the engine.
func serve(t *testing.T, cfg enginesim.Config, override http.HandlerFunc) (*enginesim.Engine, string) {
	t.Helper()
	e := enginesim.New(cfg)
	h := e.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if override != nil && r.URL.Path == "/metrics" {
			override(w, r)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.CloseClientConnections(); e.Close(); srv.Close() })
	return e, srv.URL
}

// load keeps clients closed-loop requests in flight until the test ends.
func load(t *testing.T, url, apiKey string, clients, prompt, output int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	wait := loadCtx(ctx, url, apiKey, clients, prompt, output)
	t.Cleanup(func() { cancel(); wait() })
}

// loadCtx keeps clients closed-loop requests in flight until ctx is done;
// wait returns once they have all stopped.
func loadCtx(ctx context.Context, url, apiKey string, clients, prompt, output int) (wait func()) {
	return loadText(ctx, url, apiKey, clients, "x", prompt, output)
}

// loadText is loadCtx with the prompt's text given: the limiter sizes a
// prompt by its text, the simulated engine by vigil_sim.
func loadText(ctx context.Context, url, apiKey string, clients int, text string, prompt, output int) (wait func()) {
	var wg sync.WaitGroup
	body, _ := json.Marshal(map[string]any{
		"model": "sim", "prompt": text, "max_tokens": output,
		"vigil_sim": map[string]any{"prompt_tokens": prompt, "output_tokens": output},
	})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if apiKey != "" {
					req.Header.Set("Authorization", "Bearer "+apiKey)
				}
				resp, err := client.Do(req)
				if err != nil {
					select {
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	return wg.Wait
}

func TestSaturationForALongStretchIsNeverHungAndNeverRestarts(t *testing.T) {
	t.Parallel()
	e, url := serve(t, engineConfig(), nil)
	load(t, url, "", 40, 500, 200) // a queue of ~36 behind 4 slots
	rec := watch(t, url, "", nil)
	time.Sleep(5 * time.Second)

	rec.never(t, watchdog.StateHung, watchdog.StateDown)
	if n := rec.recoveries(); n != 0 {
		t.Fatalf("a saturated engine was recovered %d times", n)
	}
	saturated := 0
	for _, v := range rec.all() {
		if v.State == watchdog.StateSaturated {
			saturated++
		}
	}
	if total := len(rec.all()); saturated < total*3/4 {
		t.Fatalf("only %d of %d verdicts saturated; last: %s", saturated, total, rec.last().Reason)
	}
	if st := e.Stats(); st.Waiting < 8 || st.Completed == 0 {
		t.Fatalf("the engine was not saturated: %+v", st)
	}
	t.Logf("last verdict: %s", rec.last().Reason)
}

func TestHangUnderLoadIsCaughtWithinHangAfterPlusTwoIntervals(t *testing.T) {
	t.Parallel()
	e, url := serve(t, engineConfig(), nil)
	load(t, url, "", 40, 500, 200)
	rec := watch(t, url, "", nil)
	time.Sleep(1500 * time.Millisecond)
	hungAt := time.Now()
	e.Hang()
	v := waitHung(t, rec, hungAt, hangAfter+10*interval)
	took := v.At.Sub(hungAt)
	t.Logf("hang under load caught after %s (bound %s): %s", took.Round(time.Millisecond), hangAfter+2*interval, v.Reason)
	if took > hangAfter+2*interval {
		t.Fatalf("caught after %s, want within hang_after + 2 intervals (%s)", took, hangAfter+2*interval)
	}
	if !strings.Contains(v.Reason, "HUNG: no progress for") {
		t.Fatalf("reason %q", v.Reason)
	}
	time.Sleep(2 * interval)
	if n := rec.recoveries(); n != 1 {
		t.Fatalf("recoveries asked %d, want 1", n)
	}
	for _, v := range rec.all() {
		if v.At.Before(hungAt) && v.State == watchdog.StateHung {
			t.Fatalf("hung before the fault: %s", v.Reason)
		}
	}
}

func TestHangWhileIdleIsCaughtThroughTheProbe(t *testing.T) {
	t.Parallel()
	e, url := serve(t, engineConfig(), nil)
	rec := watch(t, url, "", nil)
	time.Sleep(time.Second)
	if v := rec.last(); v.State != watchdog.StateHealthy {
		t.Fatalf("an idle engine is %s: %s", v.State, v.Reason)
	}
	hungAt := time.Now()
	e.Hang()
	v := waitHung(t, rec, hungAt, hangAfter+10*interval)
	took := v.At.Sub(hungAt)
	t.Logf("idle hang caught after %s: %s", took.Round(time.Millisecond), v.Reason)
	if took > hangAfter+3*interval {
		t.Fatalf("caught after %s, want within hang_after + 3 intervals", took)
	}
	if v.Evidence.Waiting+v.Evidence.Running != 0 {
		t.Fatalf("an idle hang should be caught by the probe alone: %+v", v.Evidence)
	}
}

func TestOneVeryLongPrefillAloneIsNotHung(t *testing.T) {
	t.Parallel()
	cfg := engineConfig()
	cfg.Scale = 2 // a 8,192-token chunk costs ~267 ms of engine time: 133 ms wall
	cfg.MaxModelLen = 300_000
	e, url := serve(t, cfg, nil)
	rec := watch(t, url, "", nil)
	time.Sleep(300 * time.Millisecond)
	load(t, url, "", 1, 200_000, 4)

	// Diagnose the same engine during the prefill: it must report the
	// longest legitimate gap, well under hang_after.
	c := configs.Default()
	c.Engine.URL, c.Engine.RequestTimeout = url, 400*time.Millisecond
	c.Watchdog.HangAfter, c.Watchdog.ProbeTimeout, c.Watchdog.ProbeSLO = configs.Fixed(hangAfter), probeTimeout, probeSLO
	report, err := watchdog.Diagnose(context.Background(), watchdog.Options{Engine: c.Engine, Watchdog: c.Watchdog}, 2500*time.Millisecond, interval)
	if err != nil {
		t.Fatal(err)
	}
	st := e.Stats()
	if st.PromptTokens >= 200_000 && st.Completed > 0 && st.EngineTime < 3*time.Second {
		t.Fatalf("the prefill finished too early to test anything: %+v", st)
	}
	rec.never(t, watchdog.StateHung, watchdog.StateDown)
	if rec.recoveries() != 0 {
		t.Fatal("a long prefill was recovered")
	}
	if report.State == watchdog.StateHung || report.Evidence.LongestGap >= hangAfter {
		t.Fatalf("diagnose during a long prefill: %s, longest gap %s", report.State, report.Evidence.LongestGap)
	}
	t.Logf("diagnose during the prefill: %s; longest gap %s; iteration heartbeat +%v",
		report.State, report.Evidence.LongestGap, report.Evidence.HeartbeatDeltas["vllm:iteration_tokens_total_count"])
}

func TestACrashedEngineIsDown(t *testing.T) {
	t.Parallel()
	srv, err := enginesim.Start(context.Background(), "127.0.0.1:0", engineConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	rec := watch(t, srv.URL(), "", nil)
	time.Sleep(600 * time.Millisecond)
	crashedAt := time.Now()
	srv.Engine.Crash()
	deadline := crashedAt.Add(10 * interval)
	for time.Now().Before(deadline) && rec.first(watchdog.StateDown, crashedAt) == nil {
		time.Sleep(interval / 2)
	}
	v := rec.first(watchdog.StateDown, crashedAt)
	if v == nil {
		t.Fatalf("crash not seen as down; last verdict: %s", rec.last().Reason)
	}
	t.Logf("crash seen as down after %s: %s", v.At.Sub(crashedAt).Round(time.Millisecond), v.Reason)
	if took := v.At.Sub(crashedAt); took > 3*interval+50*time.Millisecond {
		t.Fatalf("down after %s, want within down_after (2) samples", took)
	}
	time.Sleep(2 * interval)
	if rec.recoveries() != 1 {
		t.Fatalf("recoveries %d, want 1", rec.recoveries())
	}
}

func TestAnEngineLoadingAfterItsStartIsLoadingNotDown(t *testing.T) {
	t.Parallel()
	cfg := engineConfig()
	cfg.Scale = 1
	cfg.LoadTime = 1500 * time.Millisecond
	srv, err := enginesim.Start(context.Background(), "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	started := time.Now()
	rec := watch(t, srv.URL(), "", func(o *watchdog.Options) { o.EngineStarted = started })
	time.Sleep(1200 * time.Millisecond)
	if v := rec.last(); v.State != watchdog.StateLoading {
		t.Fatalf("while loading: %s: %s", v.State, v.Reason)
	}
	<-srv.Ready()
	time.Sleep(600 * time.Millisecond)
	rec.never(t, watchdog.StateDown, watchdog.StateHung)
	if v := rec.last(); v.State != watchdog.StateHealthy {
		t.Fatalf("after loading: %s: %s", v.State, v.Reason)
	}
	if rec.recoveries() != 0 {
		t.Fatal("a loading engine was recovered")
	}
}

func TestAWrongAPIKeyIsMisconfiguredAndNeverRestarted(t *testing.T) {
	t.Parallel()
	cfg := engineConfig()
	cfg.APIKey = "sk-right"
	_, url := serve(t, cfg, nil)
	rec := watch(t, url, "sk-wrong", nil)
	time.Sleep(800 * time.Millisecond)
	v := rec.last()
	if v.State != watchdog.StateMisconfigured || !strings.Contains(v.Reason, "401") {
		t.Fatalf("%s: %s", v.State, v.Reason)
	}
	rec.never(t, watchdog.StateDown, watchdog.StateHung)
	if rec.recoveries() != 0 {
		t.Fatal("a 401 was recovered")
	}
	if strings.Contains(v.Reason, "sk-wrong") {
		t.Fatal("the API key leaked into the reason")
	}
}

func TestAnEngineRestartResetsCountersAndIsReBaselined(t *testing.T) {
	t.Parallel()
	cfg := engineConfig()
	cfg.MaxNumSeqs = 64
	var current atomic.Pointer[enginesim.Engine]
	first := enginesim.New(cfg)
	current.Store(first)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		current.Load().Handler().ServeHTTP(w, r)
	}))
	second := enginesim.New(cfg)
	t.Cleanup(func() { srv.CloseClientConnections(); first.Close(); second.Close(); srv.Close() })
	load(t, srv.URL, "", 4, 500, 50)
	rec := watch(t, srv.URL, "", nil)
	time.Sleep(1500 * time.Millisecond)
	restartedAt := time.Now()
	current.Store(second) // the new engine starts from zero
	first.Close()
	time.Sleep(1500 * time.Millisecond)

	rec.never(t, watchdog.StateHung, watchdog.StateDown, watchdog.StateSaturated)
	if rec.recoveries() != 0 {
		t.Fatal("a counter reset was recovered")
	}
	reset := false
	for _, v := range rec.all() {
		// A cycle that began just before the swap may scrape after it.
		if v.At.After(restartedAt.Add(-interval)) && v.Evidence.CounterReset {
			reset = true
			t.Logf("at the reset: %s", v.Reason)
		}
	}
	if !reset {
		for _, v := range rec.all() {
			t.Logf("%s %s %+v", v.At.Format("05.000"), v.Reason, v.Evidence.CounterReset)
		}
		t.Fatal("the counter reset was never noticed")
	}
	if v := rec.last(); v.State != watchdog.StateHealthy {
		t.Fatalf("after the restart: %s: %s", v.State, v.Reason)
	}
}

func TestBrokenMetricsAreUnknownNeverFrozen(t *testing.T) {
	t.Parallel()
	realMetrics := func(e **enginesim.Engine) func() string {
		return func() string {
			rr := httptest.NewRecorder()
			(*e).Handler().ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			return rr.Body.String()
		}
	}
	cases := []struct {
		name  string
		serve func(real func() string) http.HandlerFunc
		says  string
	}{
		{"garbage", func(func() string) http.HandlerFunc {
			return func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "}}} not { metrics\n") }
		}, "parse"},
		{"truncated", func(real func() string) http.HandlerFunc {
			return func(w http.ResponseWriter, _ *http.Request) {
				body := real()
				w.Header().Set("Content-Length", fmt.Sprint(len(body)))
				io.WriteString(w, body[:len(body)/3])
			}
		}, "EOF"},
		{"missing", func(func() string) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }
		}, "404"},
		{"renamed", func(real func() string) http.HandlerFunc {
			return func(w http.ResponseWriter, _ *http.Request) {
				io.WriteString(w, strings.ReplaceAll(real(), "vllm:num_requests_waiting{", "vllm:queue_depth{"))
			}
		}, "missing vllm:num_requests_waiting"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var e *enginesim.Engine
			var broken atomic.Bool
			handler := tc.serve(realMetrics(&e))
			var url string
			e, url = serve(t, engineConfig(), func(w http.ResponseWriter, r *http.Request) {
				if broken.Load() {
					handler(w, r)
					return
				}
				e.Handler().ServeHTTP(w, r)
			})
			load(t, url, "", 4, 500, 200)
			rec := watch(t, url, "", nil)
			time.Sleep(500 * time.Millisecond)
			brokeAt := time.Now()
			broken.Store(true)
			time.Sleep(hangAfter + 5*interval)

			rec.never(t, watchdog.StateHung, watchdog.StateDown)
			if rec.recoveries() != 0 {
				t.Fatal("broken metrics were recovered")
			}
			for _, v := range rec.all() {
				// One or two bad scrapes keep the last verdict (a flaky
				// /metrics does not flip it); from the third on, unknown.
				if v.At.After(brokeAt.Add(4*interval)) && v.State != watchdog.StateUnknown {
					t.Fatalf("with %s metrics: %s: %s", tc.name, v.State, v.Reason)
				}
			}
			v := rec.last()
			if !strings.Contains(v.Evidence.MetricsError, tc.says) {
				t.Fatalf("metrics error %q does not say %q", v.Evidence.MetricsError, tc.says)
			}
			t.Logf("%s: %s", tc.name, v.Reason)
		})
	}
}
