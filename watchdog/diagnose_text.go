package watchdog

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/vigil-dev/vigil/probes"
	"github.com/vigil-dev/vigil/util/humanize"
)

// WriteText prints the report for a person: the verdict first, then what
// vigil saw, grouped the way one reasons about an engine at 3 a.m.
func (r Report) WriteText(w io.Writer) error {
	var t textReport
	r.writeVerdict(&t)
	r.writeEngine(&t)
	r.writeLimiter(&t)
	r.writeQueue(&t)
	r.writeProgress(&t)
	r.writeRanks(&t)
	r.writeCapacity(&t)
	r.writeRetryStorm(&t)
	if len(r.Missing) > 0 {
		t.line("")
		t.line("Metrics the engine does not export (check engine.metrics): %s", strings.Join(r.Missing, ", "))
	}
	_, err := io.WriteString(w, t.String())
	return err
}

// textReport is the page WriteText fills: lines, and rows of a label
// column and its value under a section's heading.
type textReport struct{ strings.Builder }

func (t *textReport) line(format string, a ...any) { fmt.Fprintf(t, format+"\n", a...) }

func (t *textReport) row(label, format string, a ...any) {
	t.line("  %-18s %s", label, fmt.Sprintf(format, a...))
}

// lacks: no readable scrape in the window had the canonical series name.
func (r Report) lacks(name string) bool { return slices.Contains(r.Lacks, name) }

// writeVerdict is the heading: what was sampled, the state with its exit
// code and reason, and what `vigil run` would do.
func (r Report) writeVerdict(t *textReport) {
	ev := r.Evidence
	model := ""
	if r.Model != "" {
		model = ", model " + r.Model
	}
	t.line("vigil diagnose: %s%s; %d samples over %s, %s", r.Engine, model, r.Samples, humanize.Duration(r.Window), r.At.UTC().Format("2006-01-02 15:04:05 MST"))
	t.line("")
	t.line("%s (exit %d)", strings.ToUpper(string(r.State)), ExitCode(r.State))
	t.line("  %s", r.Reason)
	t.line("  vigil run would: %s", r.Action)
	for _, n := range r.Notes {
		t.line("  note: %s", n)
	}
	if r.State == StateUnknown && ev.Stalled > 0 && ev.Stalled < r.HangAfter {
		t.line("  counters were frozen for %s of the %s hang_after: run again with --window longer than %s to tell hung from slow",
			humanize.Duration(ev.Stalled), humanize.Duration(r.HangAfter), humanize.Duration(r.HangAfter))
	}
}

// writeEngine is how each endpoint answered.
func (r Report) writeEngine(t *textReport) {
	ev := r.Evidence
	t.line("")
	t.line("Engine")
	t.row("/v1/models", "%s", ev.Models)
	t.row("/health", "%s", ev.Health)
	t.row("completion probe", "%s", ev.Probe)
	if ev.MetricsError != "" {
		t.row("/metrics", "unreadable: %s", ev.MetricsError)
	}
	if ev.Unanswered > 0 {
		either := ""
		if ev.ThroughVigil != nil {
			either = ", with no byte through vigil's limiter either"
		}
		t.row("no answer", "for %s from any endpoint (hung as a wedged API server at %s%s)", humanize.Duration(ev.Unanswered), humanize.Duration(r.HangAfter), either)
	}
	if ev.ProbeFailing != "" {
		t.row("probe failing", "%s (not load: check engine.model)", ev.ProbeFailing)
	}
	for _, o := range ev.Odd {
		t.row("odd", "%s", o)
	}
}

// writeQueue is the engine's queue and how fast it empties.
func (r Report) writeQueue(t *textReport) {
	ev := r.Evidence
	t.line("")
	t.line("Queue")
	if ev.QueueKnown() {
		t.row("waiting", "%s (saturated at %d)", humanize.Count(ev.Waiting), r.SaturatedWaiting)
		t.row("running", "%s", humanize.Count(ev.Running))
	} else {
		t.row("waiting", "unknown (/metrics unreadable; saturated at %d)", r.SaturatedWaiting)
		t.row("running", "unknown (/metrics unreadable)")
	}
	switch {
	case ev.CompletionsKnown && ev.CompletionsThroughVigil:
		t.row("completions/s", "%s answered through vigil's limiter (the engine counts no finished requests)", humanize.Count(ev.CompletionsPerSec))
	case ev.CompletionsKnown:
		t.row("completions/s", "%s", humanize.Count(ev.CompletionsPerSec))
	case r.lacks(probes.MetricRequestSuccess):
		t.row("completions/s", "unknown (the engine counts no finished requests; its token rate is under Progress)")
	default:
		t.row("completions/s", "unknown (too few readable scrapes in the window)")
	}
	if ev.DrainEstimate > 0 {
		t.row("est. drain", "%s", humanize.Estimate(ev.DrainEstimate))
	}
}

// writeProgress is what moved across the window, and the hang_after the
// stalls were judged against.
func (r Report) writeProgress(t *textReport) {
	ev := r.Evidence
	t.line("")
	if ev.RatesKnown() {
		t.line("Progress over %s", humanize.Duration(ev.Window))
		t.row("tokens", "+%s (%s tok/s)", humanize.Count(ev.ProgressDelta), humanize.Count(ev.TokensPerSec))
	} else {
		t.line("Progress")
		t.row("tokens", "unknown (fewer than two readable /metrics scrapes in the window)")
	}
	for _, name := range sortedNames(ev.HeartbeatDeltas) {
		t.row("heartbeat", "+%s %s", humanize.Count(ev.HeartbeatDeltas[name]), name)
	}
	if ev.RatesKnown() {
		t.row("since progress", "%s", humanize.Duration(ev.SinceProgress))
	} else {
		t.row("since progress", "unknown (no counter read twice)")
	}
	if ev.HangAfterWhy != "" {
		t.row("hang_after", "%s", ev.HangAfterWhy)
		if ev.HangAfterFrom != "" {
			t.row("learned from", "%s", ev.HangAfterFrom)
		}
	} else {
		t.row("hang_after", "%s (fixed)", humanize.Duration(r.HangAfter))
	}
	if ev.Stalled > 0 {
		t.row("stalled", "%s with work pending (hung at %s)", humanize.Duration(ev.Stalled), humanize.Duration(r.HangAfter))
	}
	if ev.RatesKnown() {
		t.row("longest gap", "%s between counter moves while work was pending; hang_after (%s) must exceed the longest legitimate one",
			humanize.Duration(ev.LongestGap), humanize.Duration(r.HangAfter))
	} else {
		t.row("longest gap", "unknown (no counter read twice); hang_after (%s) must exceed the longest legitimate one", humanize.Duration(r.HangAfter))
	}
	if ev.CounterReset {
		t.row("counters", "reset during the window (engine restarted); re-baselined")
	}
	if ev.DecodeStalled > 0 {
		t.row("decode", "no decode token for %s while requests got first tokens (hung at %s)", humanize.Duration(ev.DecodeStalled), humanize.Duration(r.HangAfter))
	}
}

// writeRanks is each data-parallel rank, when the engine has several.
func (r Report) writeRanks(t *textReport) {
	ranks := r.Evidence.Ranks
	if len(ranks) <= 1 {
		return
	}
	t.line("")
	t.line("Data-parallel ranks (%d)", len(ranks))
	for _, rk := range ranks {
		st := "moving"
		switch {
		case rk.Hung:
			st = fmt.Sprintf("HUNG: no progress for %s with work pending", humanize.Duration(rk.Stalled))
		case rk.Waiting+rk.Running == 0:
			st = "idle"
		case rk.Stalled > 0:
			st = fmt.Sprintf("frozen for %s with work pending (hung at %s)", humanize.Duration(rk.Stalled), humanize.Duration(r.HangAfter))
		}
		t.row("rank "+rk.Rank, "%s waiting, %s running; %s", humanize.Count(rk.Waiting), humanize.Count(rk.Running), st)
	}
}

// writeCapacity is what the engine runs at once and the cap it suggests.
func (r Report) writeCapacity(t *textReport) {
	t.line("")
	t.line("Capacity")
	switch {
	case r.Slots != nil && r.SlotsWithProbe:
		t.row("slots", "%d, %d processing (llama.cpp's /slots: the most it runs at once; vigil's probe, still out, may be one of them)", r.Slots.Total, r.Slots.Processing)
	case r.Slots != nil:
		t.row("slots", "%d, %d processing (llama.cpp's /slots: the most it runs at once)", r.Slots.Total, r.Slots.Processing)
	case r.SlotsError != "":
		t.row("slots", "unknown (%s)", r.SlotsError)
	}
	configured := capWords(r.MaxInFlight)
	switch l := r.Load; {
	case l != nil:
		t.row("in flight", "%s (Little's law: %s completions/s x %s mean latency)", humanize.Count(l.InFlight), humanize.Count(l.CompletionsPerSec), humanize.Duration(l.MeanLatency))
		t.row("executing", "%s at once (latency less %s of queue time in the engine)", humanize.Count(l.Executing), humanize.Duration(l.MeanQueue))
		if l.Saturated {
			t.row("recommended cap", "max_in_flight %d: more only queues inside the engine (configured: %s)", l.RecommendedCap, configured)
		} else {
			t.row("recommended cap", "not judged: the engine did not queue in the window, so this is demand, not capacity (configured: %s)", configured)
		}
	case r.lacks(probes.MetricE2ELatencyCount):
		t.row("in flight", "unknown (the engine exports no request latency histogram for Little's law)")
		if s := r.Slots; s != nil {
			t.row("recommended cap", "max_in_flight %d: the engine's slots; more only queues inside it (configured: %s)", s.Total, configured)
		}
	default:
		t.row("in flight", "unknown (no request completed in the window)")
	}
}

// writeRetryStorm is the retry-storm check's outcome, under Capacity.
func (r Report) writeRetryStorm(t *textReport) {
	switch rs := r.RetryStorm; {
	case rs.Alarm:
		t.row("retry storm", "ALARM: prompt tokens +%s vs prefix-cache queries +%s (ratio %.2f): the engine prefills for clients that left",
			humanize.Count(rs.PromptTokens), humanize.Count(rs.PrefixCacheQueries), rs.Ratio)
	case rs.Judged:
		t.row("retry storm", "no: prompt tokens +%s vs prefix-cache queries +%s (ratio %.2f)",
			humanize.Count(rs.PromptTokens), humanize.Count(rs.PrefixCacheQueries), rs.Ratio)
	case r.lacks(probes.MetricPrefixCacheQueries) || r.lacks(probes.MetricPromptTokens):
		t.row("retry storm", "not judged (the engine exports no %s counter)", stormLacks(r))
	default:
		t.row("retry storm", "not judged (too little traffic in the window)")
	}
}

// stormLacks names the retry-storm counters the engine lacks: llama.cpp
// counts prompt tokens but no prefix-cache queries, and saying it has
// neither would be untrue.
func stormLacks(r Report) string {
	var lacks []string
	if r.lacks(probes.MetricPromptTokens) {
		lacks = append(lacks, "prompt-token")
	}
	if r.lacks(probes.MetricPrefixCacheQueries) {
		lacks = append(lacks, "prefix-cache query")
	}
	return strings.Join(lacks, " or ")
}
