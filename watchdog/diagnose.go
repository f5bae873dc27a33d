package watchdog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/probes"
)

// Report is the outcome of Diagnose: the verdict, its evidence, and the
// figures an operator sizes vigil with.
type Report struct {
	State    State     `json:"state"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
	Evidence Evidence  `json:"evidence"`
	// Action is what `vigil run` would do about State.
	Action string `json:"action"`

	Engine string `json:"engine"`
	// Model is the model the probe asked for.
	Model string `json:"model,omitempty"`
	// Window is the span actually sampled; Samples how many were taken.
	Window   time.Duration `json:"-"`
	Interval time.Duration `json:"-"`
	Samples  int           `json:"samples"`

	// HangAfter and SaturatedWaiting are the thresholds the verdict used.
	HangAfter        time.Duration `json:"-"`
	SaturatedWaiting int           `json:"saturated_waiting"`

	// InFlight is Little's law over the window (InFlightKnown false
	// without completions); MaxInFlight the limiter's cap beside it.
	InFlight      float64 `json:"-"`
	InFlightKnown bool    `json:"in_flight_known"`
	MaxInFlight   int     `json:"max_in_flight,omitempty"`
	// Load is Little's law in full, with the recommended cap.
	Load *Load `json:"load,omitempty"`

	RetryStorm RetryStormCheck `json:"retry_storm"`
	// Missing lists configured metrics the engine does not export.
	Missing []string `json:"missing_metrics,omitempty"`
	// Lacks lists the canonical series (probes.Metric*) no readable scrape
	// in the window had: the figures drawn from them are unknown for this
	// engine, not zero (llama.cpp counts no finished requests and has no
	// latency histogram).
	Lacks []string `json:"engine_lacks,omitempty"`
	// Slots is llama.cpp's /slots at the end of the window: the requests it
	// runs at once, its capacity without Little's law (nil on other
	// engines, or with SlotsError when /slots could not be read).
	Slots      *probes.Slots `json:"slots,omitempty"`
	SlotsError string        `json:"slots_error,omitempty"`
	// SlotsWithProbe: vigil's own probe was still in flight when /slots
	// was read, and may be one of the slots processing.
	SlotsWithProbe bool `json:"slots_include_probe,omitempty"`
	// Notes are hints for the operator beside the verdict, e.g. that an
	// engine refusing connections may still be loading.
	Notes []string `json:"notes,omitempty"`
	// Limiter is what the local vigil's limiter counted across the window,
	// when Options.LimiterSource was given: the calls the engine answered
	// through it while its API server may answer no probe.
	Limiter *LimiterSeen `json:"limiter,omitempty"`
}

// MarshalJSON writes durations as seconds, and in_flight only when it is
// known: a 0 there reads as an idle engine.
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report
	return json.Marshal(struct {
		plain
		InFlight  *float64 `json:"in_flight,omitempty"`
		Window    float64  `json:"window_seconds"`
		Interval  float64  `json:"interval_seconds"`
		HangAfter float64  `json:"hang_after_seconds"`
	}{plain(r), knownOnly(r.InFlight, r.InFlightKnown), r.Window.Seconds(), r.Interval.Seconds(), r.HangAfter.Seconds()})
}

// ExitCode maps a state to `vigil diagnose`'s exit code: 0 healthy, 1
// saturated, 2 hung or down, 3 anything else.
func ExitCode(s State) int {
	switch s {
	case StateHealthy:
		return 0
	case StateSaturated:
		return 1
	case StateHung, StateDown:
		return 2
	}
	return 3
}

// Diagnose samples the engine across window, every interval (at least two
// samples), and classifies the result as `vigil run` would. It needs only
// opts.Engine and opts.Watchdog (and uses opts.Probes, Now, EngineStarted,
// MaxInFlight and LimiterSource when set); it changes nothing. An unreachable engine is
// a verdict, not an error; the error is for an interrupted run.
func Diagnose(ctx context.Context, opts Options, window, interval time.Duration) (Report, error) {
	if interval <= 0 {
		return Report{}, errors.New("diagnose: interval must be > 0")
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	p := opts.Probes
	kind := func() string { return opts.Engine.Kind }
	pc := probes.FromConfig(opts.Engine, opts.Watchdog)
	if p == nil {
		pc.Now = now
		c := probes.NewClient(pc)
		defer c.Close()
		p, kind = c, c.Kind
	}
	n := max(int(window/interval)+1, 2)
	// Each sample's requests are bounded by the interval, so the whole run
	// takes about window + interval.
	timeout := opts.Engine.RequestTimeout
	if timeout <= 0 || timeout > interval {
		timeout = interval
	}
	sm := &sampler{p: p, src: opts.LimiterSource, timeout: timeout}
	history, model, err := sampleWindow(ctx, sm, opts.Engine.Model, now, n, interval)
	if err != nil {
		return Report{}, err
	}
	params := diagnoseParams(opts, history)
	last := history[len(history)-1]
	v := Classify(history, params, last.At)

	r := Report{
		State: v.State, Reason: v.Reason, At: v.At, Evidence: v.Evidence,
		Engine: opts.Engine.URL, Model: model,
		Window: last.At.Sub(history[0].At), Interval: interval, Samples: n,
		HangAfter: params.HangAfter, SaturatedWaiting: params.SaturatedWaiting,
		MaxInFlight: opts.MaxInFlight,
		RetryStorm:  CheckRetryStorm(history, opts.Watchdog.RetryStorm),
		Action:      actionFor(v.State, true, opts.Watchdog.DryRun),
	}
	if l, ok := LoadOver(history, r.Window); ok {
		r.InFlight, r.InFlightKnown, r.Load = l.InFlight, true, &l
	}
	if sm.src != nil {
		r.Limiter = seenThrough(history, sm.src.String(), sm.lastFailure())
	}
	r.Lacks = lacking(history)
	if kind() == configs.KindLlamaCpp {
		// /slots counts vigil's own probe as a request processing: idle,
		// a real llama-server read "2, 1 processing". Read it once the
		// probe has ended (it was the last thing diagnose sent), or say
		// it may be among them.
		r.SlotsWithProbe = !probeEnded(ctx, p, timeout)
		r.Slots, r.SlotsError = readSlots(ctx, pc.Target, timeout)
	}
	if v.State == StateDown && (last.Health.Class == probes.ClassRefused || last.Models.Class == probes.ClassRefused) {
		r.Notes = append(r.Notes, "the port refuses connections: the engine may still be loading its model (vLLM opens its port only once loaded, and diagnose cannot know when it started); run again in a few minutes or read the engine's log before restarting it")
	}
	r.Missing = lastMissing(history)
	return r, nil
}

// sampleWindow takes n samples an interval apart and returns them with
// the model the last probe that knew one asked for. Samples are taken on
// schedule, each in its own goroutine: a server that answers nothing must
// not stretch a 30 s window into minutes of timeouts.
func sampleWindow(ctx context.Context, sm *sampler, model string, now func() time.Time, n int, interval time.Duration) ([]Sample, string, error) {
	history := make([]Sample, n)
	models := make([]string, n)
	begin := time.Now()
	done := make(chan int, n)
	for i := range n {
		if i > 0 {
			wait := time.Until(begin.Add(time.Duration(i) * interval))
			t := time.NewTimer(max(wait, 0))
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, "", fmt.Errorf("diagnose: interrupted after %d of %d samples: %w", i, n, ctx.Err())
			case <-t.C:
			}
		}
		at := now()
		go func() {
			s := sm.take(ctx, at)
			m := model
			if m == "" {
				m = s.Models.First()
			}
			if i < n-1 {
				// The last sample's probe would be polled by no sample:
				// it would only load the engine, and sit in a slot when
				// /slots is read.
				sm.p.StartCompletion(m)
			}
			history[i], models[i] = s, m
			done <- i
		}()
	}
	for range n {
		select {
		case <-done:
		case <-ctx.Done():
			return nil, "", fmt.Errorf("diagnose: interrupted while the last samples ran: %w", ctx.Err())
		}
	}
	var asked string
	for _, m := range models {
		if m != "" {
			asked = m
		}
	}
	return history, asked, nil
}

// diagnoseParams are the configured thresholds fitted to one short window
// of samples: no more consecutive failures asked for than were taken, and
// hang_after: auto learned from these samples and the engine's own figures
// (its prefill rate, its context length) from the first scrape.
func diagnoseParams(opts Options, history []Sample) Params {
	params := ParamsFrom(opts.Watchdog)
	params.DownAfter = min(max(params.DownAfter, 1), len(history))
	params.LastStart = opts.EngineStarted
	params.RateWindow = history[len(history)-1].At.Sub(history[0].At)
	if params.HangAfter == 0 {
		var l workLog
		whole := wholeScrapes(history)
		for i := 2; i <= len(whole); i++ {
			l.learn(whole[:i], whole[i-1].At)
		}
		win := autoWindow(whole, &l, params.HangAfterMin, params.HangAfterMax)
		params.HangAfter, params.WindowWhy, params.WindowFrom = win.D, win.Why, win.From
	}
	return params
}

// lastMissing is the configured metrics the last scrape that said anything
// (readable, or unreadable for want of them) lacked.
func lastMissing(history []Sample) []string {
	for i := len(history) - 1; i >= 0; i-- {
		if m := history[i].Metrics; m.Readable() || len(m.Missing) > 0 {
			return m.Missing
		}
	}
	return nil
}

func sortedNames(m map[string]float64) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// lacking lists the canonical extra series that no readable scrape of
// history had; nil when no scrape was readable (then nothing is known to
// be missing).
func lacking(history []Sample) []string {
	seen := map[string]bool{}
	readable := false
	for i := range history {
		if !history[i].readable() {
			continue
		}
		readable = true
		for n := range history[i].Metrics.Metrics.Extra {
			seen[n] = true
		}
	}
	if !readable {
		return nil
	}
	var out []string
	for _, n := range []string{probes.MetricRequestSuccess, probes.MetricE2ELatencyCount, probes.MetricPromptTokens, probes.MetricPrefixCacheQueries} {
		if !seen[n] {
			out = append(out, n)
		}
	}
	return out
}

// capWords is admission.max_in_flight as configured.
func capWords(maxInFlight int) string {
	if maxInFlight > 0 {
		return fmt.Sprint(maxInFlight)
	}
	return "automatic"
}

// probeEnded waits up to timeout for vigil's own completion probe to end;
// false if it is still out.
func probeEnded(ctx context.Context, p Probes, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for p.PollCompletion().Pending() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// readSlots reads llama.cpp's /slots for the report.
func readSlots(ctx context.Context, t probes.Target, timeout time.Duration) (*probes.Slots, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, err := probes.ReadSlots(ctx, t)
	if err != nil {
		return nil, err.Error()
	}
	return &s, ""
}
