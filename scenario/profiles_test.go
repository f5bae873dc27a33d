package scenario_test

import (
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/watchdog"
)

// Every engine profile gets the same verdicts from the same engine: the
// simulated engine serves vLLM's, SGLang's or llama.cpp's names, and the
// watchdog runs with engine.kind auto (it must pick the profile itself)
// or with the kind set.
func TestIdleSaturatedAndHungOnEveryEngineProfile(t *testing.T) {
	profiles := []struct {
		names string
		kind  string
	}{
		{enginesim.MetricsVLLM, configs.KindAuto},
		{enginesim.MetricsSGLang, configs.KindAuto},
		{enginesim.MetricsLlamaCpp, configs.KindLlamaCpp},
	}
	for _, p := range profiles {
		withKind := func(o *watchdog.Options) {
			o.Engine.Kind = p.kind
			o.Engine.Metrics = o.Engine.MetricsFor(p.kind)
			if p.kind == configs.KindAuto {
				o.Engine.Metrics = o.Engine.MetricsFor(configs.KindVLLM)
			}
		}
		cfg := engineConfig()
		cfg.Metrics = p.names
		t.Run(p.names+" names, kind "+p.kind+": an idle engine is healthy", func(t *testing.T) {
			t.Parallel()
			_, url := serve(t, cfg, nil)
			rec := watch(t, url, "", withKind)
			time.Sleep(time.Second)
			rec.never(t, watchdog.StateHung, watchdog.StateDown, watchdog.StateUnknown)
			if v := rec.last(); v.State != watchdog.StateHealthy {
				t.Fatalf("an idle engine is %s: %s", v.State, v.Reason)
			}
		})
		t.Run(p.names+" names, kind "+p.kind+": saturated is never hung", func(t *testing.T) {
			t.Parallel()
			_, url := serve(t, cfg, nil)
			load(t, url, "", 24, 500, 200) // ~20 waiting behind 4 slots
			rec := watch(t, url, "", withKind)
			time.Sleep(3 * time.Second)
			rec.never(t, watchdog.StateHung, watchdog.StateDown)
			if n := rec.recoveries(); n != 0 {
				t.Fatalf("a saturated engine was recovered %d times", n)
			}
			if rec.first(watchdog.StateSaturated, time.Time{}) == nil {
				t.Fatalf("never saturated; last: %s", rec.last().Reason)
			}
		})
		t.Run(p.names+" names, kind "+p.kind+": a hang under load is hung", func(t *testing.T) {
			t.Parallel()
			e, url := serve(t, cfg, nil)
			load(t, url, "", 24, 500, 200) // ~20 waiting behind 4 slots
			rec := watch(t, url, "", withKind)
			time.Sleep(1500 * time.Millisecond)
			hungAt := time.Now()
			e.Hang()
			v := waitHung(t, rec, hungAt, hangAfter+10*interval)
			for _, v := range rec.all() {
				if v.At.Before(hungAt) && v.State == watchdog.StateHung {
					t.Fatalf("hung before the fault: %s", v.Reason)
				}
			}
			t.Logf("%s", v.Reason)
		})
		// The partial failure every profile can see: the rank and decode
		// rules are off where the engine's counters cannot carry them.
		t.Run(p.names+" names, kind "+p.kind+": a wedged API server is hung", func(t *testing.T) {
			t.Parallel()
			e, url := serve(t, cfg, nil)
			load(t, url, "", 4, 200, 50)
			rec := watch(t, url, "", withKind)
			time.Sleep(time.Second)
			wedgedAt := time.Now()
			e.Wedge()
			v := waitHung(t, rec, wedgedAt, hangAfter+15*interval)
			if v.Evidence.Hang != watchdog.HangWedged {
				t.Fatalf("reason %q: want a wedged API server", v.Reason)
			}
		})
	}
}
