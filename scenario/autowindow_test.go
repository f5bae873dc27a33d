package scenario_test

import (
	"context"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/admission"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/watchdog"
)

// hang_after: auto, with the limiter in front as vigil runs by default.
// The window's floor and ceiling stand, at the scenarios' scale, for a
// 15 s floor under a 3 min ceiling.
const (
	autoFloor   = 300 * time.Millisecond
	autoCeiling = 4 * time.Second
)

// throughLimiter serves the engine behind vigil's limiter and watches it
// with hang_after: auto, the limiter's counts read every cycle. Heartbeats
// are off: only the token counters tell progress, so a long prefill is
// silent until its first token (the worst case the window must cover).
func throughLimiter(t *testing.T, cfg enginesim.Config) (*enginesim.Engine, string, *recorder) {
	t.Helper()
	e, engineURL := serve(t, cfg, nil)
	u, _ := url.Parse(engineURL)
	ac := configs.Default().Admission
	lim, err := admission.New(ac, u, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lim.Close)
	front := httptest.NewServer(lim.Handler())
	t.Cleanup(front.Close)
	rec := watch(t, engineURL, "", func(o *watchdog.Options) {
		o.Watchdog.HangAfter = configs.Automatic()
		o.Watchdog.HangAfterMin, o.Watchdog.HangAfterMax = autoFloor, autoCeiling
		o.Engine.Metrics.Heartbeats = nil
		o.LimiterLoad = func() watchdog.LimiterLoad { return watchdog.LimiterLoad(lim.Load()) }
	})
	return e, front.URL, rec
}

func TestAHangUnderChatLoadIsCaughtInSecondsWithAnAutomaticWindow(t *testing.T) {
	t.Parallel()
	e, url, rec := throughLimiter(t, engineConfig())
	load(t, url, "", 3, 500, 60)
	time.Sleep(2 * time.Second)
	var legit time.Duration
	for _, v := range rec.all() {
		legit = max(legit, v.Evidence.LongestGap)
	}
	hungAt := time.Now()
	e.Hang()
	v := waitHung(t, rec, hungAt, autoCeiling+10*interval)
	took := v.At.Sub(hungAt)
	t.Logf("hung after %s (longest legitimate gap before %s): %s; %s", took.Round(time.Millisecond), legit, v.Reason, v.Evidence.HangAfterWhy)
	if bound := max(2*legit, autoFloor) + 3*interval; took > bound {
		t.Fatalf("caught after %s; want within the floor or twice the longest legitimate gap, plus 3 intervals (%s)", took, bound)
	}
	if v.Evidence.HangAfter >= autoCeiling/2 {
		t.Fatalf("the window in force was %s (%s): sized like the ceiling, not the work", v.Evidence.HangAfter, v.Evidence.HangAfterWhy)
	}
}

func TestALoneLongPrefillOnASlowEngineIsNeverHungWithAnAutomaticWindow(t *testing.T) {
	t.Parallel()
	cfg := engineConfig()
	cfg.Scale = 2 // a 100,000-token prefill: ~3.1 s of engine time, ~1.6 s wall
	cfg.MaxModelLen = 200_000
	_, url, rec := throughLimiter(t, cfg)
	// Chat load first, so the engine is seen serving and its prefill rate
	// measured; then the long prompt alone.
	stopChat := loadFor(t, url, 2, 500, 20)
	time.Sleep(1500 * time.Millisecond)
	stopChat()
	time.Sleep(300 * time.Millisecond)
	from := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	wait := loadText(ctx, url, "", 1, strings.Repeat("word ", 80_000), 100_000, 4) // ~100,000 tokens by the limiter's estimate
	t.Cleanup(func() { cancel(); wait() })
	time.Sleep(3 * time.Second)

	rec.never(t, watchdog.StateHung, watchdog.StateDown)
	if rec.recoveries() != 0 {
		t.Fatal("a long prefill was recovered")
	}
	var sized watchdog.Verdict
	for _, v := range rec.all() {
		if v.At.After(from) && strings.Contains(v.Evidence.HangAfterWhy, "longest prefill in flight 100,0") {
			sized = v
		}
	}
	if sized.Evidence.HangAfterWhy == "" {
		t.Fatalf("no window was sized from the long prompt in flight; last: %s", rec.last().Evidence.HangAfterWhy)
	}
	t.Logf("window during the prefill: %s", sized.Evidence.HangAfterWhy)
}

// loadFor is load that the returned function stops (and waits for).
func loadFor(t *testing.T, url string, clients, prompt, output int) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	wait := loadCtx(ctx, url, "", clients, prompt, output)
	stop = func() { cancel(); wait() }
	t.Cleanup(stop)
	return stop
}

// The "never restart" workloads, with hang_after: auto and the limiter in
// front: an overload, and an engine ten times slower than the scenarios'
// (the lone long prefill is the test above).
func TestNeverRestartWorkloadsAreNeverHungWithAnAutomaticWindow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		scale   float64
		clients int
		prompt  int
		output  int
	}{
		{"an overload of 10x the engine's seats", 20, 40, 500, 200},
		{"an engine ten times slower", 2, 8, 2000, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := engineConfig()
			cfg.Scale = tc.scale
			_, url, rec := throughLimiter(t, cfg)
			load(t, url, "", tc.clients, tc.prompt, tc.output)
			time.Sleep(5 * time.Second)
			rec.never(t, watchdog.StateHung, watchdog.StateDown)
			if n := rec.recoveries(); n != 0 {
				t.Fatalf("recovered %d times", n)
			}
			t.Logf("last: %s; %s", rec.last().Reason, rec.last().Evidence.HangAfterWhy)
		})
	}
}
