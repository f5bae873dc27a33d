package scenario_test

import (
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/watchdog"
)

// The partial failures of issue #12, each on the simulated engine over
// real HTTP with real probes: /health stays 200 and summed counters hide
// the fault. Each hung row asks for exactly one recovery; each serving
// row asks for none and is never down or hung.

// waitHung waits for the first hung verdict after from.
func waitHung(t *testing.T, rec *recorder, from time.Time, within time.Duration) *watchdog.Verdict {
	t.Helper()
	deadline := from.Add(within)
	for time.Now().Before(deadline) && rec.first(watchdog.StateHung, from) == nil {
		time.Sleep(interval / 2)
	}
	v := rec.first(watchdog.StateHung, from)
	if v == nil {
		t.Fatalf("not hung within %s; last verdict: %s", within, rec.last().Reason)
	}
	return v
}

// oneRecovery checks the hung row's outcome: one recovery, and no hung
// or down verdict before the fault.
func oneRecovery(t *testing.T, rec *recorder, faultAt time.Time) {
	t.Helper()
	time.Sleep(2 * interval)
	if n := rec.recoveries(); n != 1 {
		t.Fatalf("recoveries asked %d, want 1", n)
	}
	for _, v := range rec.all() {
		if v.At.Before(faultAt) && (v.State == watchdog.StateHung || v.State == watchdog.StateDown) {
			t.Fatalf("%s before the fault: %s", v.State, v.Reason)
		}
	}
}

func TestOneDataParallelRankHungUnderLoadIsHungNamingTheRank(t *testing.T) {
	t.Parallel()
	cfg := engineConfig()
	cfg.DataParallel = 2
	e, url := serve(t, cfg, nil)
	load(t, url, "", 40, 500, 200)
	rec := watch(t, url, "", nil)
	time.Sleep(1500 * time.Millisecond)
	hungAt := time.Now()
	if err := e.HangRank(1); err != nil {
		t.Fatal(err)
	}
	v := waitHung(t, rec, hungAt, hangAfter+10*interval)
	t.Logf("rank hang caught after %s: %s", v.At.Sub(hungAt).Round(time.Millisecond), v.Reason)
	if took := v.At.Sub(hungAt); took > hangAfter+3*interval {
		t.Errorf("caught after %s, want within hang_after + 3 intervals", took)
	}
	if v.Evidence.Hang != watchdog.HangRank || !strings.Contains(v.Reason, "rank 1 of 2: no progress for") {
		t.Fatalf("reason %q does not name rank 1 of 2", v.Reason)
	}
	// Before the verdict the summed counters still moved: it was
	// saturated, not hung, until rank 1 had been frozen for hang_after.
	if e.Stats().Ranks[0].Steps == 0 {
		t.Fatal("rank 0 never stepped")
	}
	oneRecovery(t, rec, hungAt)
}

func TestAnIdleRankBesideABusyOneIsNeverHung(t *testing.T) {
	t.Parallel()
	cfg := engineConfig()
	cfg.DataParallel = 2
	e, url := serve(t, cfg, nil)
	// One closed-loop client: round-robin alternates its calls, so each
	// rank is idle half the time; neither is ever frozen with work.
	load(t, url, "", 1, 200, 50)
	rec := watch(t, url, "", nil)
	time.Sleep(4 * time.Second)
	rec.never(t, watchdog.StateHung, watchdog.StateDown)
	if rec.recoveries() != 0 {
		t.Fatal("a serving data-parallel engine was recovered")
	}
	if st := e.Stats(); st.Completed == 0 {
		t.Fatalf("no load went through: %+v", st)
	}
}

func TestADecodeStallWhilePrefillGoesOnIsHung(t *testing.T) {
	t.Parallel()
	cfg := engineConfig()
	cfg.MaxNumSeqs = 64 // seats for new requests to keep getting first tokens
	e, url := serve(t, cfg, nil)
	load(t, url, "", 12, 300, 400)
	rec := watch(t, url, "", nil)
	time.Sleep(1500 * time.Millisecond)
	stallAt := time.Now()
	e.StallDecode()
	// Clients that arrive later still get their first token.
	load(t, url, "", 20, 300, 400)
	v := waitHung(t, rec, stallAt, hangAfter+10*interval)
	t.Logf("decode stall caught after %s: %s", v.At.Sub(stallAt).Round(time.Millisecond), v.Reason)
	if v.Evidence.Hang != watchdog.HangDecode || !strings.Contains(v.Reason, "decode stalled") {
		t.Fatalf("reason %q: want a decode stall", v.Reason)
	}
	// A few intervals: the stall is seen from the first decode step after
	// it, and cycles slip under CI's parallel packages (seen: 1.9 s).
	if took := v.At.Sub(stallAt); took > hangAfter+8*interval {
		t.Errorf("caught after %s, want within hang_after + a few intervals", took)
	}
	// Between the stall and the verdict, vigil never called it hung for
	// another reason, and never down.
	for _, x := range rec.all() {
		if x.State == watchdog.StateDown {
			t.Fatalf("down: %s", x.Reason)
		}
	}
	oneRecovery(t, rec, stallAt)
}

func TestAWedgedAPIServerIsHungOnceNothingAnswersForHangAfter(t *testing.T) {
	t.Parallel()
	e, url := serve(t, engineConfig(), nil)
	load(t, url, "", 4, 200, 50)
	rec := watch(t, url, "", nil)
	time.Sleep(time.Second)
	wedgedAt := time.Now()
	e.Wedge()
	v := waitHung(t, rec, wedgedAt, hangAfter+15*interval)
	t.Logf("wedge caught after %s: %s", v.At.Sub(wedgedAt).Round(time.Millisecond), v.Reason)
	if v.Evidence.Hang != watchdog.HangWedged || !strings.Contains(v.Reason, "wedged") {
		t.Fatalf("reason %q: want a wedged API server", v.Reason)
	}
	if v.At.Sub(wedgedAt) < hangAfter {
		t.Fatalf("wedged called after %s, before hang_after", v.At.Sub(wedgedAt))
	}
	oneRecovery(t, rec, wedgedAt)
}

func TestModelsAnswering503OnAServingEngineIsNeverDownNorRestarted(t *testing.T) {
	t.Parallel()
	e, url := serve(t, engineConfig(), nil)
	load(t, url, "", 6, 200, 50)
	rec := watch(t, url, "", nil)
	time.Sleep(500 * time.Millisecond)
	if err := e.FailEndpoint("/v1/models", 503); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	rec.never(t, watchdog.StateDown, watchdog.StateHung)
	if rec.recoveries() != 0 {
		t.Fatal("a serving engine with /v1/models 503 was recovered")
	}
	last := rec.last()
	if !strings.Contains(last.Reason, "odd: /v1/models answers 503") {
		t.Fatalf("the oddity is not said: %s", last.Reason)
	}
}

func TestAProbeFailingUnderSaturationIsNamedInTheVerdict(t *testing.T) {
	t.Parallel()
	_, url := serve(t, engineConfig(), nil)
	load(t, url, "", 40, 500, 200)
	rec := watch(t, url, "", func(o *watchdog.Options) { o.Engine.Model = "no-such-model" })
	time.Sleep(3 * time.Second)
	rec.never(t, watchdog.StateHung, watchdog.StateDown)
	last := rec.last()
	if last.State != watchdog.StateSaturated || !strings.Contains(last.Reason, "probe failing: 404") {
		t.Fatalf("%s: %s; want saturated naming the failing probe", last.State, last.Reason)
	}
}
