package watchdog

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/probes"
)

func TestExitCodeByState(t *testing.T) {
	t.Parallel()
	want := map[State]int{
		StateHealthy: 0, StateSaturated: 1, StateHung: 2, StateDown: 2,
		StateMisconfigured: 3, StateUnknown: 3, StateLoading: 3,
	}
	for s, code := range want {
		if got := ExitCode(s); got != code {
			t.Errorf("ExitCode(%s) = %d, want %d", s, got, code)
		}
	}
}

func diagnoseOptions(f *fakeEngine) Options {
	cfg := configs.Default()
	return Options{Engine: cfg.Engine, Watchdog: cfg.Watchdog, Probes: f, MaxInFlight: 32}
}

func TestDiagnoseASaturatedEngine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeEngine()
		f.set(func(f *fakeEngine) {
			f.waiting, f.running, f.tokensPerSec = 99, 8, 2340
			f.probeLatency = 40 * time.Second
		})
		r, err := Diagnose(context.Background(), diagnoseOptions(f), 30*time.Second, 15*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != StateSaturated || r.Samples != 3 || r.Window != 30*time.Second {
			t.Fatalf("report %s, %d samples over %s: %s", r.State, r.Samples, r.Window, r.Reason)
		}
		if r.Evidence.TokensPerSec < 2300 || r.Evidence.TokensPerSec > 2400 {
			t.Fatalf("tokens/s %v", r.Evidence.TokensPerSec)
		}
		var text bytes.Buffer
		if err := r.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"SATURATED (exit 1)",
			"vigil run would: page; tell the limiter; never restart",
			"/v1/models         200 in 2ms (llama)",
			"completion probe   outstanding for 30s",
			"waiting            99 (saturated at 8)",
			"longest gap",
			"hang_after         hang_after 3m00s (auto, the ceiling): 107 requests in the engine and no limiter in front",
			"learned from       prefill rate: 2,340 tok/s over 30s of busy cycles seen by vigil",
			"Metrics the engine does not export (check engine.metrics): vllm:prefix_cache_queries_total",
		} {
			if !strings.Contains(text.String(), want) {
				t.Errorf("text report lacks %q:\n%s", want, text.String())
			}
		}

		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			State    string         `json:"state"`
			Reason   string         `json:"reason"`
			Window   float64        `json:"window_seconds"`
			Evidence map[string]any `json:"evidence"`
		}
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		if got.State != "saturated" || got.Reason != r.Reason || got.Window != 30 {
			t.Fatalf("json %s", raw)
		}
		if from, _ := got.Evidence["hang_after_from"].(string); !strings.HasPrefix(from, "prefill rate: ") {
			t.Errorf("json evidence hang_after_from %q", from)
		}
		if got.Evidence["waiting"] != 99.0 || got.Evidence["window_seconds"] != 30.0 || got.Evidence["probe_latency_seconds"] != 30.0 {
			t.Fatalf("json evidence %v", got.Evidence)
		}
	})
}

func TestDiagnoseTakesAtLeastTwoSamples(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeEngine()
		r, err := Diagnose(context.Background(), diagnoseOptions(f), 0, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if r.Samples != 2 || r.State != StateHealthy {
			t.Fatalf("%d samples, %s: %s", r.Samples, r.State, r.Reason)
		}
	})
}

func TestDiagnoseOfAShortStallSaysToWatchLonger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeEngine()
		f.set(func(f *fakeEngine) { f.waiting, f.running, f.mode = 40, 8, "hung" })
		r, err := Diagnose(context.Background(), diagnoseOptions(f), 30*time.Second, 15*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var text bytes.Buffer
		r.WriteText(&text)
		if r.State != StateUnknown || !strings.Contains(text.String(), "run again with --window longer than 3m00s") {
			t.Fatalf("%s:\n%s", r.State, text.String())
		}
	})
}

func TestDiagnoseStopsWhenInterrupted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := Diagnose(ctx, diagnoseOptions(newFakeEngine()), time.Minute, 15*time.Second)
		if err == nil || !strings.Contains(err.Error(), "interrupted after 2 of 5 samples") {
			t.Fatalf("error %v", err)
		}
	})
}

func TestEvidenceJSONRoundTripsInSeconds(t *testing.T) {
	t.Parallel()
	ev := Evidence{Window: 15 * time.Second, SinceProgress: 185 * time.Second, DrainEstimate: 6 * time.Minute,
		HeartbeatDeltas: map[string]float64{"x": 3}, Probe: "ok in 4ms", Stalled: time.Second, CounterReset: true,
		ThroughVigil: &ThroughVigil{Answered: 42, Silent: 1500 * time.Millisecond}}
	raw, err := json.Marshal(Verdict{State: StateHung, Evidence: ev})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"since_progress_seconds":185`) || !strings.Contains(string(raw), `"through_vigil":{"answered":42,"silent_seconds":1.5}`) {
		t.Fatalf("durations not in seconds: %s", raw)
	}
	var back Verdict
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if back.Evidence.SinceProgress != ev.SinceProgress || back.Evidence.DrainEstimate != ev.DrainEstimate || !back.Evidence.CounterReset ||
		back.Evidence.ThroughVigil == nil || *back.Evidence.ThroughVigil != *ev.ThroughVigil {
		t.Fatalf("round trip: %+v", back.Evidence)
	}
}

// Issue #12: a wedged API server (accepts, never answers) must not
// stretch the window: samples are taken on schedule, each bounded, so
// `diagnose --window 1s` with a 10 s request timeout still ends in about
// window + interval, and says nothing has answered.
func TestDiagnoseOfAWedgedServerSamplesOnSchedule(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	cfg := configs.Default()
	cfg.Engine.URL = srv.URL
	cfg.Engine.RequestTimeout = 10 * time.Second
	start := time.Now()
	r, err := Diagnose(context.Background(), Options{Engine: cfg.Engine, Watchdog: cfg.Watchdog}, time.Second, 250*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("diagnose over a 1s window took %s: the timeouts stretched it", took)
	}
	if r.State != StateUnknown || r.Evidence.Unanswered <= 0 || !strings.Contains(r.Reason, "no endpoint has answered") {
		t.Fatalf("%s %s (unanswered %s)", r.State, r.Reason, r.Evidence.Unanswered)
	}
}

// An engine that refuses connections may be loading: diagnose cannot know
// when it started, so it says so beside DOWN.
func TestDiagnoseOfARefusingEngineSaysItMayBeLoading(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := configs.Default()
	cfg.Engine.URL = "http://" + addr
	r, err := Diagnose(context.Background(), Options{Engine: cfg.Engine, Watchdog: cfg.Watchdog}, 200*time.Millisecond, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	_ = r.WriteText(&text)
	if r.State != StateDown || len(r.Notes) == 0 || !strings.Contains(text.String(), "may still be loading") {
		t.Fatalf("%s: %s\n%s", r.State, r.Reason, text.String())
	}
}

// A figure the engine cannot give is printed as unknown with the reason,
// never as 0: on llama.cpp (no finished-request counter, no latency
// histogram, no prefix-cache queries) diagnose once printed
// "completions/s 0" under load while calls completed. A measured 0 stays 0.
func TestDiagnoseSaysUnknownForWhatTheEngineLacks(t *testing.T) {
	llama := []string{probes.MetricRequestSuccess, probes.MetricE2ELatencyCount, probes.MetricPrefixCacheQueries}
	for _, tc := range []struct {
		name     string
		r        Report
		want     []string
		jsonRate bool
	}{
		{"llama.cpp under load", Report{State: StateSaturated, Lacks: llama,
			Slots:    &probes.Slots{Total: 2, Processing: 2},
			Evidence: Evidence{Waiting: 22, Running: 2, TokensPerSec: 310}},
			[]string{
				"slots              2, 2 processing (llama.cpp's /slots: the most it runs at once)",
				"recommended cap    max_in_flight 2: the engine's slots; more only queues inside it (configured: automatic)",
				"completions/s      unknown (the engine counts no finished requests; its token rate is under Progress)",
				"in flight          unknown (the engine exports no request latency histogram for Little's law)",
				// It counts prompt tokens: only the queries are lacking.
				"retry storm        not judged (the engine exports no prefix-cache query counter)",
				"tokens             +0 (310 tok/s)",
			}, false},
		{"llama.cpp behind vigil's limiter: the calls it answered", Report{State: StateSaturated, Lacks: llama,
			Evidence: Evidence{Waiting: 0, Running: 2, TokensPerSec: 310, CompletionsPerSec: 9, CompletionsKnown: true, CompletionsThroughVigil: true}},
			[]string{
				"completions/s      9 answered through vigil's limiter (the engine counts no finished requests)",
			}, true},
		// A llama-server started without --metrics answers /metrics 501:
		// its queue and progress are unknown (they printed as 0 waiting,
		// 0 running, +0 tokens).
		{"llama.cpp without --metrics", Report{State: StateUnknown,
			Evidence: Evidence{MetricsError: "501 Not Implemented", Samples: 1, NoRates: true}},
			[]string{
				"waiting            unknown (/metrics unreadable; saturated at 0)",
				"running            unknown (/metrics unreadable)",
				"completions/s      unknown (too few readable scrapes in the window)",
				"Progress\n",
				"tokens             unknown (fewer than two readable /metrics scrapes in the window)",
				"since progress     unknown (no counter read twice)",
				"longest gap        unknown (no counter read twice)",
			}, false},
		{"vLLM, idle: a measured 0", Report{State: StateHealthy,
			Evidence: Evidence{CompletionsKnown: true}},
			[]string{
				"completions/s      0\n",
				"in flight          unknown (no request completed in the window)",
				"retry storm        not judged (too little traffic in the window)",
			}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var text bytes.Buffer
			if err := tc.r.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.want {
				if !strings.Contains(text.String(), want) {
					t.Errorf("text lacks %q:\n%s", want, text.String())
				}
			}
			raw, err := json.Marshal(tc.r.Evidence)
			if err != nil {
				t.Fatal(err)
			}
			var ev map[string]any
			if err := json.Unmarshal(raw, &ev); err != nil {
				t.Fatal(err)
			}
			if _, has := ev["completions_per_second"]; has != tc.jsonRate {
				t.Errorf("json has completions_per_second: %v, want %v: %s", has, tc.jsonRate, raw)
			}
			// The report's JSON writes no figure it does not know as 0:
			// on a real llama-server it once gave in_flight 0, a drain
			// estimate of 0 s with 6 waiting, and retry-storm deltas of 0
			// while prompt tokens were counted.
			raw, err = json.Marshal(tc.r)
			if err != nil {
				t.Fatal(err)
			}
			var rep struct {
				Evidence   map[string]any `json:"evidence"`
				RetryStorm map[string]any `json:"retry_storm"`
				InFlight   *float64       `json:"in_flight"`
			}
			if err := json.Unmarshal(raw, &rep); err != nil {
				t.Fatal(err)
			}
			if rep.InFlight != nil {
				t.Errorf("json gives in_flight %v, unknown: %s", *rep.InFlight, raw)
			}
			if d, has := rep.Evidence["drain_estimate_seconds"]; has {
				t.Errorf("json gives a drain estimate %v with no completion rate: %s", d, raw)
			}
			for _, k := range []string{"prompt_tokens_delta", "prefix_cache_queries_delta", "ratio", "window_seconds"} {
				if v, has := rep.RetryStorm[k]; has {
					t.Errorf("json gives retry_storm.%s %v, not read: %s", k, v, raw)
				}
			}
			if !tc.r.Evidence.QueueKnown() || !tc.r.Evidence.RatesKnown() {
				for _, k := range []string{"waiting", "running", "progress_delta", "tokens_per_second", "since_progress_seconds", "longest_gap_seconds"} {
					if v, has := rep.Evidence[k]; has {
						t.Errorf("json gives evidence.%s %v with /metrics unreadable: %s", k, v, raw)
					}
				}
			}
		})
	}
}

// /status's capacity and the retry-storm check write a figure only when it
// was read: llama.cpp counts no finished requests and no prefix-cache
// queries, and a 0 in their place reads as an engine completing nothing.
func TestUnknownFiguresAreLeftOutOfTheJSON(t *testing.T) {
	for _, tc := range []struct {
		name          string
		v             any
		want, wantOut []string
	}{
		{"capacity, nothing known", Capacity{TokensPerSec: 900},
			[]string{"tokens_per_second", "completions_known", "in_flight_known"},
			[]string{"completions_per_second", "in_flight"}},
		{"capacity, a measured 0", Capacity{CompletionsKnown: true, InFlightKnown: true},
			[]string{"completions_per_second", "in_flight"}, []string{"completions_through_vigil"}},
		{"capacity, the limiter's count", Capacity{CompletionsKnown: true, CompletionsThroughVigil: true, CompletionsPerSec: 9},
			[]string{"completions_per_second", "completions_through_vigil"}, []string{"in_flight"}},
		{"retry storm, counters lacking", RetryStormCheck{},
			[]string{"judged", "alarm"},
			[]string{"prompt_tokens_delta", "prefix_cache_queries_delta", "ratio", "window_seconds"}},
		{"retry storm, read but too little traffic", RetryStormCheck{Read: true, PromptTokens: 40, Window: time.Minute},
			[]string{"prompt_tokens_delta", "prefix_cache_queries_delta", "window_seconds"},
			[]string{"ratio"}},
		{"retry storm, judged", RetryStormCheck{Read: true, Judged: true, PromptTokens: 40, PrefixCacheQueries: 400, Ratio: 0.1},
			[]string{"prompt_tokens_delta", "prefix_cache_queries_delta", "ratio"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatal(err)
			}
			for _, k := range tc.want {
				if _, ok := got[k]; !ok {
					t.Errorf("%s lacks %s", raw, k)
				}
			}
			for _, k := range tc.wantOut {
				if v, ok := got[k]; ok {
					t.Errorf("%s gives %s %v, unknown", raw, k, v)
				}
			}
		})
	}
}
