package llamacpp_test

// `vigil diagnose` against the real engine, text and --json, idle and under
// load: every line it prints is matched by a rule here (a line no rule
// knows fails the test), and the figures are checked against the engine's
// own /metrics read by the test over the same seconds. A figure llama.cpp
// cannot give must say unknown in the text and be absent from the JSON,
// never 0 (issue 38: "completions/s 0" while 9 calls a second completed).

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// report is the part of `vigil diagnose --json` the tests read.
type report struct {
	State      string         `json:"state"`
	EngineKind string         `json:"engine_kind"`
	Evidence   map[string]any `json:"evidence"`
	Lacks      []string       `json:"engine_lacks"`
	InFlight   *float64       `json:"in_flight"`
	RetryStorm map[string]any `json:"retry_storm"`
	Slots      *struct {
		Total      int `json:"total"`
		Processing int `json:"processing"`
	} `json:"slots"`
	SlotsWithProbe bool `json:"slots_include_probe"`
}

// diagnosed is one text and one --json diagnose of the same engine.
type diagnosed struct {
	text      string
	textCode  int
	json      report
	jsonRaw   string
	jsonCode  int
	took      time.Duration
	tokens    float64 // the engine's prompt + predicted tokens over took
	heartbeat float64 // its n_decode_total over took
}

// diagnoseBoth runs text and --json diagnose on engine over window, together when
// together (under load: no figure depends on the other's probe) or one
// after the other (idle: one's probe would sit in a slot the other
// reads), and reads the engine's own counters before and after.
func diagnoseBoth(t *testing.T, engine string, together bool, window time.Duration) diagnosed {
	t.Helper()
	var d diagnosed
	tok0, beat0 := engineCounters(t, engine)
	start := time.Now()
	var wg sync.WaitGroup
	runJSON := func() {
		d.jsonRaw, d.jsonCode = diagnose(t, engine, "--json", "--window", window.String())
	}
	if together {
		wg.Go(runJSON)
	} else {
		runJSON()
	}
	d.text, d.textCode = diagnose(t, engine, "--window", window.String())
	wg.Wait()
	d.took = time.Since(start)
	tok1, beat1 := engineCounters(t, engine)
	d.tokens, d.heartbeat = tok1-tok0, beat1-beat0
	if err := json.Unmarshal([]byte(d.jsonRaw), &d.json); err != nil {
		t.Fatalf("diagnose --json: %v:\n%s", err, d.jsonRaw)
	}
	return d
}

// engineCounters reads llama.cpp's token counters (prompt + predicted)
// and its decode heartbeat.
func engineCounters(t *testing.T, engine string) (tokens, heartbeat float64) {
	t.Helper()
	for _, name := range []string{"llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total", "llamacpp:n_decode_total"} {
		v, err := scrape(engine, name)
		if err != nil {
			t.Fatalf("the test's own read of the engine: %v", err)
		}
		if name == "llamacpp:n_decode_total" {
			heartbeat = v
		} else {
			tokens += v
		}
	}
	return tokens, heartbeat
}

// A line rule: the regexp a line must match, and a check of its
// submatches (nil: none).
type rule struct {
	re    *regexp.Regexp
	check func(m []string) error
}

func line(re string, check func(m []string) error) rule {
	return rule{regexp.MustCompile("^" + re + "$"), check}
}

// checkEveryLine fails for a line no rule matches, a rule no line
// matches, and a failed check.
func checkEveryLine(t *testing.T, out string, rules []rule) {
	t.Helper()
	used := make([]bool, len(rules))
	for _, ln := range strings.Split(out, "\n") {
		if strings.TrimSpace(ln) == "" {
			continue
		}
		matched := false
		for i, r := range rules {
			m := r.re.FindStringSubmatch(ln)
			if m == nil {
				continue
			}
			matched, used[i] = true, true
			if r.check != nil {
				if err := r.check(m); err != nil {
					t.Errorf("diagnose: %q: %v", ln, err)
				}
			}
			break
		}
		if !matched {
			t.Errorf("diagnose prints a line no check knows (is it true?): %q", ln)
		}
	}
	for i, r := range rules {
		if !used[i] {
			t.Errorf("diagnose lacks a line matching %s", r.re)
		}
	}
	if t.Failed() {
		t.Logf("diagnose said:\n%s", out)
	}
}

// num reads a figure as diagnose prints it (1,247 or 2.5k or 6.0).
func num(s string) float64 {
	s = strings.ReplaceAll(s, ",", "")
	mult := 1.0
	if v, ok := strings.CutSuffix(s, "k"); ok {
		s, mult = v, 1e3
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return -1
	}
	return f * mult
}

// dur reads a duration as diagnose prints it (0s, 3.0s, 439ms, 3m00s).
func dur(s string) time.Duration {
	if m, sec, ok := strings.Cut(s, "m"); ok && strings.HasSuffix(sec, "s") && !strings.HasSuffix(s, "ms") {
		d, err := time.ParseDuration(m + "m" + sec)
		if err == nil {
			return d
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return -1
	}
	return d
}

// counted checks a count diagnose printed for its window against the
// engine's own count over the test's span, which holds that window: it
// can be no more (the engine did not do it), and under a steady load
// (share > 0) no less than share of it, the window's part of the span,
// within a factor of 2.5. Idle, only diagnose's probes move the
// counters, too few for a rate to be steady: the upper bound alone.
func counted(what string, got, total, share float64) error {
	if got < 0 || got > total {
		return fmt.Errorf("%s %.0f, more than the engine's own counters moved over the whole test (%.0f)", what, got, total)
	}
	if want := total * share; share > 0 && got < want/2.5 {
		return fmt.Errorf("%s %.0f, the engine's own counters say %.0f over as many seconds", what, got, want)
	}
	return nil
}

// commonRules are the lines every diagnose of this engine prints,
// whatever its load. window is diagnose's --window.
func commonRules(d diagnosed, window time.Duration, steady bool) []rule {
	within := func(what string, max time.Duration) func(m []string) error {
		return func(m []string) error {
			if v := dur(m[1]); v < 0 || v > max {
				return fmt.Errorf("%s %s, want at most %s", what, m[1], max)
			}
			return nil
		}
	}
	share := 0.0
	if steady {
		share = window.Seconds() / d.took.Seconds()
	}
	return []rule{
		line(`sampling http://127\.0\.0\.1:\d+ for \S+ every 500ms\.\.\.`, nil),
		line(`vigil diagnose: http://127\.0\.0\.1:\d+, model \S+/tiny-llama\.gguf; (\d+) samples over (\S+), \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC`,
			func(m []string) error {
				if n := num(m[1]); n != float64(window/(500*time.Millisecond)+1) {
					return fmt.Errorf("%s samples, want one every 500ms over %s", m[1], window)
				}
				if w := dur(m[2]); w < window-100*time.Millisecond || w > window+time.Second {
					return fmt.Errorf("over %s, want about %s", m[2], window)
				}
				return nil
			}),
		line(`Engine`, nil), line(`Queue`, nil), line(`Capacity`, nil), line(`Engine kind`, nil),
		line(`  /v1/models +200 in \S+ \(\S+/tiny-llama\.gguf\)`, nil),
		line(`  /health +200 in \S+`, nil),
		line(`  completion probe +(?:ok in|outstanding for|timeout after) (\S+)`, within("the probe", window)),
		line(`  completions/s +unknown \(the engine counts no finished requests; its token rate is under Progress\)`, nil),
		line(`Progress over (\S+)`, within("progress over", window+time.Second)),
		line(`  tokens +\+(\S+) \((\S+) tok/s\)`, func(m []string) error {
			return counted("tokens", num(m[1]), d.tokens, share)
		}),
		line(`  heartbeat +\+(\S+) llamacpp:n_decode_total`, func(m []string) error {
			return counted("decode calls", num(m[1]), d.heartbeat, share)
		}),
		line(`  since progress +(\S+)`, within("since progress", window)),
		// A fresh engine may have one of its two prefill figures only.
		line(`  learned from +prefill rate: (?:the engine's prefill time, the slower of \S+ tok/s over the last (\S+) and \S+ tok/s since it started|\S+ tok/s by the engine's prefill time); no silence with work pending logged`,
			func(m []string) error {
				if m[1] == "" {
					return nil
				}
				return within("the recent prefill rate's span", window)(m)
			}),
		line(`  longest gap +(\S+) between counter moves while work was pending; hang_after \(\S+\) must exceed the longest legitimate one`,
			within("the longest gap", window)),
		line(`  in flight +unknown \(the engine exports no request latency histogram for Little's law\)`, nil),
		line(`  recommended cap +max_in_flight 2: the engine's slots; more only queues inside it \(configured: automatic\)`, nil),
		// llama.cpp counts prompt tokens; it lacks only the queries.
		line(`  retry storm +not judged \(the engine exports no prefix-cache query counter\)`, nil),
		line(`  llamacpp \(engine\.kind auto: picked from the metric families of the first scrape\)`, nil),
	}
}

// checkJSON checks the --json report's figures: what llama.cpp cannot
// give is absent, never 0.
func checkJSON(t *testing.T, d diagnosed, state string, slotsBusy int) {
	t.Helper()
	r := d.json
	if r.State != state || r.EngineKind != "llamacpp" {
		t.Errorf("diagnose --json: state %q, kind %q, want %s, llamacpp", r.State, r.EngineKind, state)
	}
	for _, k := range []string{"completions_per_second", "drain_estimate_seconds"} {
		if v, has := r.Evidence[k]; has {
			t.Errorf("diagnose --json gives evidence.%s %v, which llama.cpp does not count", k, v)
		}
	}
	if r.InFlight != nil {
		t.Errorf("diagnose --json gives in_flight %v without a latency histogram", *r.InFlight)
	}
	for _, k := range []string{"prompt_tokens_delta", "prefix_cache_queries_delta", "ratio"} {
		if v, has := r.RetryStorm[k]; has {
			t.Errorf("diagnose --json gives retry_storm.%s %v, which llama.cpp cannot be judged by", k, v)
		}
	}
	wantLacks := "vllm:request_success_total vllm:e2e_request_latency_seconds_count vllm:prefix_cache_queries_total"
	if got := strings.Join(r.Lacks, " "); got != wantLacks {
		t.Errorf("diagnose --json: engine_lacks %q, want %q", got, wantLacks)
	}
	if r.Slots == nil || r.Slots.Total != slots || r.Slots.Processing != slotsBusy {
		t.Errorf("diagnose --json: slots %+v, want %d, %d processing", r.Slots, slots, slotsBusy)
	}
	if tps, _ := r.Evidence["tokens_per_second"].(float64); tps <= 0 {
		t.Errorf("diagnose --json: no token rate: %v", r.Evidence)
	}
	if t.Failed() {
		t.Logf("diagnose --json said:\n%s", d.jsonRaw)
	}
}

// checkIdle: an idle engine, only diagnose's own probes moving it.
func checkIdle(t *testing.T, d diagnosed, window time.Duration) {
	t.Helper()
	if d.textCode != 0 || d.jsonCode != 0 {
		t.Errorf("diagnose exit %d (text), %d (--json), want 0: healthy", d.textCode, d.jsonCode)
	}
	checkJSON(t, d, "healthy", 0)
	if w, r := d.json.Evidence["waiting"], d.json.Evidence["running"]; w != 0.0 || r != 0.0 {
		t.Errorf("diagnose --json: %v waiting, %v running on an idle engine", w, r)
	}
	checkEveryLine(t, d.text, append(commonRules(d, window, false),
		line(`HEALTHY \(exit 0\)`, nil),
		line(`  HEALTHY: idle \(0 waiting, 0 running\); /v1/models 200 in \S+ \(\S+/tiny-llama\.gguf\); probe ok in \S+`, nil),
		line(`  vigil run would: resolve any open incident`, nil),
		line(`  waiting +0 \(saturated at 8\)`, nil),
		line(`  running +0`, nil),
		line(`  hang_after +hang_after 15s \(auto, the floor\): no silence with work pending seen, nothing long in flight; x3 margin`, nil),
		// Read once diagnose's own probe ended: idle is 0 processing
		// (it read 1, the probe's, before).
		line(`  slots +2, 0 processing \(llama\.cpp's /slots: the most it runs at once\)`, nil),
	))
}

// checkLoaded: clients clients on the engine's slots, all of its queue
// theirs.
func checkLoaded(t *testing.T, d diagnosed, window time.Duration, clients int) {
	t.Helper()
	if d.textCode != 1 || d.jsonCode != 1 {
		t.Errorf("diagnose exit %d (text), %d (--json), want 1: saturated", d.textCode, d.jsonCode)
	}
	checkJSON(t, d, "saturated", slots)
	// The engine holds the clients' calls and up to three probes: vigil
	// run's and the two diagnoses'.
	const probes = 3
	queue := func(i int) func(m []string) error {
		return func(m []string) error {
			if w := num(m[i]); w < 1 || w > float64(clients+probes-slots) {
				return fmt.Errorf("%s waiting, want 1..%d (%d clients and %d probes on %d slots)", m[i], clients+probes-slots, clients, probes, slots)
			}
			return nil
		}
	}
	checkEveryLine(t, d.text, append(commonRules(d, window, true),
		line(`SATURATED \(exit 1\)`, nil),
		line(`  SATURATED: (\S+) waiting, 2 running, \S+ tok/s, counters \+\S+ in \S+(?:; probe .+ \(SLO \S+\))?; not restarting`, queue(1)),
		line(`  vigil run would: page; tell the limiter; never restart`, nil),
		line(`  waiting +(\S+) \(saturated at 8\)`, queue(1)),
		line(`  running +2`, nil),
		line(`  hang_after +hang_after 3m00s \(auto, the ceiling\): (\d+) requests in the engine and no limiter in front to size them`,
			func(m []string) error {
				if n := num(m[1]); n < slots+1 || n > float64(clients+probes) {
					return fmt.Errorf("%s requests in the engine, want %d..%d", m[1], slots+1, clients+probes)
				}
				return nil
			}),
		line(`  slots +2, 2 processing \(llama\.cpp's /slots: the most it runs at once(; vigil's probe, still out, may be one of them)?\)`, nil),
	))
}
