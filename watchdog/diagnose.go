package watchdog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/probes"
	"github.com/vigil-dev/vigil/util/humanize"
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
	InFlight      float64 `json:"in_flight"`
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
	// Notes are hints for the operator beside the verdict, e.g. that an
	// engine refusing connections may still be loading.
	Notes []string `json:"notes,omitempty"`
}

// MarshalJSON writes durations as seconds.
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report
	return json.Marshal(struct {
		plain
		Window    float64 `json:"window_seconds"`
		Interval  float64 `json:"interval_seconds"`
		HangAfter float64 `json:"hang_after_seconds"`
	}{plain(r), r.Window.Seconds(), r.Interval.Seconds(), r.HangAfter.Seconds()})
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
// opts.Engine and opts.Watchdog (and uses opts.Probes, Now, EngineStarted
// and MaxInFlight when set); it changes nothing. An unreachable engine is
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
	history := make([]Sample, n)
	// Samples are taken on schedule, each in its own goroutine: a server
	// that answers nothing must not stretch a 30 s window into minutes of
	// timeouts. Each sample's requests are bounded by the interval too, so
	// the whole run takes about window + interval.
	timeout := opts.Engine.RequestTimeout
	if timeout <= 0 || timeout > interval {
		timeout = interval
	}
	begin := time.Now()
	done := make(chan int, n)
	models := make([]string, n)
	for i := range n {
		if i > 0 {
			wait := time.Until(begin.Add(time.Duration(i) * interval))
			t := time.NewTimer(max(wait, 0))
			select {
			case <-ctx.Done():
				t.Stop()
				return Report{}, fmt.Errorf("diagnose: interrupted after %d of %d samples: %w", i, n, ctx.Err())
			case <-t.C:
			}
		}
		at := now()
		go func() {
			s := sampleOnce(ctx, p, at, timeout)
			m := opts.Engine.Model
			if m == "" {
				m = s.Models.First()
			}
			p.StartCompletion(m)
			history[i], models[i] = s, m
			done <- i
		}()
	}
	for range n {
		select {
		case <-done:
		case <-ctx.Done():
			return Report{}, fmt.Errorf("diagnose: interrupted while the last samples ran: %w", ctx.Err())
		}
	}
	var model string
	for _, m := range models {
		if m != "" {
			model = m
		}
	}
	last := history[len(history)-1]
	params := ParamsFrom(opts.Watchdog)
	params.DownAfter = min(max(params.DownAfter, 1), n)
	params.LastStart = opts.EngineStarted
	params.RateWindow = last.At.Sub(history[0].At)
	if params.HangAfter == 0 {
		// auto: what these samples teach, and the engine's own figures
		// (its prefill rate, its context length) from the first scrape.
		var l workLog
		whole := wholeScrapes(history)
		for i := 2; i <= len(whole); i++ {
			l.learn(whole[:i], whole[i-1].At)
		}
		win := autoWindow(whole, &l, params.HangAfterMin, params.HangAfterMax)
		params.HangAfter, params.WindowWhy, params.WindowFrom = win.D, win.Why, win.From
	}
	v := Classify(history, params, last.At)

	r := Report{
		State: v.State, Reason: v.Reason, At: v.At, Evidence: v.Evidence,
		Engine: opts.Engine.URL, Model: model,
		Window: last.At.Sub(history[0].At), Interval: interval, Samples: n,
		HangAfter: params.HangAfter, SaturatedWaiting: params.SaturatedWaiting,
		MaxInFlight: opts.MaxInFlight,
		RetryStorm:  CheckRetryStorm(history, opts.Watchdog.RetryStorm),
	}
	if l, ok := LoadOver(history, r.Window); ok {
		r.InFlight, r.InFlightKnown, r.Load = l.InFlight, true, &l
	}
	r.Lacks = lacking(history)
	if kind() == configs.KindLlamaCpp {
		r.Slots, r.SlotsError = readSlots(ctx, pc.Target, timeout)
	}
	r.Action = actionFor(v.State, true, opts.Watchdog.DryRun)
	if v.State == StateDown && (last.Health.Class == probes.ClassRefused || last.Models.Class == probes.ClassRefused) {
		r.Notes = append(r.Notes, "the port refuses connections: the engine may still be loading its model (vLLM opens its port only once loaded, and diagnose cannot know when it started); run again in a few minutes or read the engine's log before restarting it")
	}
	for i := len(history) - 1; i >= 0; i-- {
		if m := history[i].Metrics; m.Readable() || len(m.Missing) > 0 {
			r.Missing = m.Missing
			break
		}
	}
	return r, nil
}

// WriteText prints the report for a person: the verdict first, then what
// vigil saw, grouped the way one reasons about an engine at 3 a.m.
func (r Report) WriteText(w io.Writer) error {
	ev := r.Evidence
	var b strings.Builder
	line := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	row := func(label, format string, a ...any) { line("  %-18s %s", label, fmt.Sprintf(format, a...)) }

	model := ""
	if r.Model != "" {
		model = ", model " + r.Model
	}
	line("vigil diagnose: %s%s; %d samples over %s, %s", r.Engine, model, r.Samples, humanize.Duration(r.Window), r.At.UTC().Format("2006-01-02 15:04:05 MST"))
	line("")
	line("%s (exit %d)", strings.ToUpper(string(r.State)), ExitCode(r.State))
	line("  %s", r.Reason)
	line("  vigil run would: %s", r.Action)
	for _, n := range r.Notes {
		line("  note: %s", n)
	}
	if r.State == StateUnknown && ev.Stalled > 0 && ev.Stalled < r.HangAfter {
		line("  counters were frozen for %s of the %s hang_after: run again with --window longer than %s to tell hung from slow",
			humanize.Duration(ev.Stalled), humanize.Duration(r.HangAfter), humanize.Duration(r.HangAfter))
	}
	line("")
	line("Engine")
	row("/v1/models", "%s", ev.Models)
	row("/health", "%s", ev.Health)
	row("completion probe", "%s", ev.Probe)
	if ev.MetricsError != "" {
		row("/metrics", "unreadable: %s", ev.MetricsError)
	}
	if ev.Unanswered > 0 {
		row("no answer", "for %s from any endpoint (hung as a wedged API server at %s)", humanize.Duration(ev.Unanswered), humanize.Duration(r.HangAfter))
	}
	if ev.ProbeFailing != "" {
		row("probe failing", "%s (not load: check engine.model)", ev.ProbeFailing)
	}
	for _, o := range ev.Odd {
		row("odd", "%s", o)
	}
	line("")
	line("Queue")
	row("waiting", "%s (saturated at %d)", humanize.Count(ev.Waiting), r.SaturatedWaiting)
	row("running", "%s", humanize.Count(ev.Running))
	lacks := func(name string) bool { return slices.Contains(r.Lacks, name) }
	switch {
	case ev.CompletionsKnown:
		row("completions/s", "%s", humanize.Count(ev.CompletionsPerSec))
	case lacks(probes.MetricRequestSuccess):
		row("completions/s", "unknown (the engine counts no finished requests; its token rate is under Progress)")
	default:
		row("completions/s", "unknown (too few readable scrapes in the window)")
	}
	if ev.DrainEstimate > 0 {
		row("est. drain", "%s", humanize.Estimate(ev.DrainEstimate))
	}
	line("")
	line("Progress over %s", humanize.Duration(ev.Window))
	row("tokens", "+%s (%s tok/s)", humanize.Count(ev.ProgressDelta), humanize.Count(ev.TokensPerSec))
	for _, name := range sortedNames(ev.HeartbeatDeltas) {
		row("heartbeat", "+%s %s", humanize.Count(ev.HeartbeatDeltas[name]), name)
	}
	row("since progress", "%s", humanize.Duration(ev.SinceProgress))
	if ev.HangAfterWhy != "" {
		row("hang_after", "%s", ev.HangAfterWhy)
		if ev.HangAfterFrom != "" {
			row("learned from", "%s", ev.HangAfterFrom)
		}
	} else {
		row("hang_after", "%s (fixed)", humanize.Duration(r.HangAfter))
	}
	if ev.Stalled > 0 {
		row("stalled", "%s with work pending (hung at %s)", humanize.Duration(ev.Stalled), humanize.Duration(r.HangAfter))
	}
	row("longest gap", "%s between counter moves while work was pending; hang_after (%s) must exceed the longest legitimate one",
		humanize.Duration(ev.LongestGap), humanize.Duration(r.HangAfter))
	if ev.CounterReset {
		row("counters", "reset during the window (engine restarted); re-baselined")
	}
	if ev.DecodeStalled > 0 {
		row("decode", "no decode token for %s while requests got first tokens (hung at %s)", humanize.Duration(ev.DecodeStalled), humanize.Duration(r.HangAfter))
	}
	if len(ev.Ranks) > 1 {
		line("")
		line("Data-parallel ranks (%d)", len(ev.Ranks))
		for _, rk := range ev.Ranks {
			st := "moving"
			switch {
			case rk.Hung:
				st = fmt.Sprintf("HUNG: no progress for %s with work pending", humanize.Duration(rk.Stalled))
			case rk.Waiting+rk.Running == 0:
				st = "idle"
			case rk.Stalled > 0:
				st = fmt.Sprintf("frozen for %s with work pending (hung at %s)", humanize.Duration(rk.Stalled), humanize.Duration(r.HangAfter))
			}
			row("rank "+rk.Rank, "%s waiting, %s running; %s", humanize.Count(rk.Waiting), humanize.Count(rk.Running), st)
		}
	}
	line("")
	line("Capacity")
	switch {
	case r.Slots != nil:
		row("slots", "%d, %d processing (llama.cpp's /slots: the most it runs at once)", r.Slots.Total, r.Slots.Processing)
	case r.SlotsError != "":
		row("slots", "unknown (%s)", r.SlotsError)
	}
	if l := r.Load; l != nil {
		row("in flight", "%s (Little's law: %s completions/s x %s mean latency)", humanize.Count(l.InFlight), humanize.Count(l.CompletionsPerSec), humanize.Duration(l.MeanLatency))
		row("executing", "%s at once (latency less %s of queue time in the engine)", humanize.Count(l.Executing), humanize.Duration(l.MeanQueue))
		cap := capWords(r.MaxInFlight)
		if l.Saturated {
			row("recommended cap", "max_in_flight %d: more only queues inside the engine (configured: %s)", l.RecommendedCap, cap)
		} else {
			row("recommended cap", "not judged: the engine did not queue in the window, so this is demand, not capacity (configured: %s)", cap)
		}
	} else if lacks(probes.MetricE2ELatencyCount) {
		row("in flight", "unknown (the engine exports no request latency histogram for Little's law)")
		if s := r.Slots; s != nil {
			row("recommended cap", "max_in_flight %d: the engine's slots; more only queues inside it (configured: %s)", s.Total, capWords(r.MaxInFlight))
		}
	} else {
		row("in flight", "unknown (no request completed in the window)")
	}
	switch rs := r.RetryStorm; {
	case rs.Alarm:
		row("retry storm", "ALARM: prompt tokens +%s vs prefix-cache queries +%s (ratio %.2f): the engine prefills for clients that left",
			humanize.Count(rs.PromptTokens), humanize.Count(rs.PrefixCacheQueries), rs.Ratio)
	case rs.Judged:
		row("retry storm", "no: prompt tokens +%s vs prefix-cache queries +%s (ratio %.2f)",
			humanize.Count(rs.PromptTokens), humanize.Count(rs.PrefixCacheQueries), rs.Ratio)
	case lacks(probes.MetricPrefixCacheQueries) || lacks(probes.MetricPromptTokens):
		row("retry storm", "not judged (the engine exports no prompt-token or prefix-cache query counter)")
	default:
		row("retry storm", "not judged (too little traffic in the window)")
	}
	if len(r.Missing) > 0 {
		line("")
		line("Metrics the engine does not export (check engine.metrics): %s", strings.Join(r.Missing, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
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
