package watchdog

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/probes"
	"github.com/vigil-dev/vigil/util/humanize"
)

// Classify turns the recent samples into a verdict, first match wins:
//
//   - loading: within StartupGrace after LastStart, never ready since;
//   - down: the engine itself is down on DownAfter consecutive samples,
//     outside grace: /health refused, reset or 5xx, or /v1/models and
//     /metrics both failing so (engineDown), and no positive evidence of
//     serving in those samples (counters rising, a probe completing). One
//     endpoint's 5xx on a serving engine is odd, never down;
//   - misconfigured: a 401/403 from any endpoint;
//   - loading (asleep): the engine says it was put to sleep on purpose
//     (vLLM's /is_sleeping true): never hung while it sleeps;
//   - hung (wedged): /v1/models, /health and /metrics all timing out, no
//     answer at all, for HangAfter, and no probe answer in that time;
//   - hung (engine): /v1/models answering or timing out, and no progress
//     signal moved for HangAfter while work was pending (waiting + running
//     > 0, or our probe unanswered), unless a probe completed meanwhile;
//   - hung (rank): with several data-parallel ranks, one rank's counters
//     frozen for HangAfter while its own queues hold work, whatever the
//     others do (an idle rank is never hung);
//   - hung (decode): first tokens keep coming but no decode token for
//     HangAfter while requests that got a first token wait for a second;
//   - saturated: progress moving, and waiting >= SaturatedWaiting or the
//     probe timed out or exceeded ProbeSLO;
//   - healthy: progress moving or idle, and the probe OK; after a hang in
//     the open incident (ProofSince), only on positive evidence;
//   - unknown: anything else: the scrape is unreadable (never taken as
//     frozen), no earlier sample to compare with, a slow server that still
//     answers, or progress stalled for less than HangAfter.
//
// A probe that keeps failing for a reason other than load (e.g. a 404 for
// a model the engine does not serve) is named in every verdict's reason.
// A counter that goes down means the engine restarted: it counts as a move
// and rates restart from there. Classify is pure: history (oldest first),
// p and now are all it reads.
func Classify(history []Sample, p Params, now time.Time) Verdict {
	v := Verdict{At: now, State: StateUnknown}
	if len(history) == 0 {
		v.Reason = "UNKNOWN: no sample yet"
		return v
	}
	history = wholeScrapes(history)
	sc := scanHistory(history, now)
	sc.discount(p.Paused, now)
	v.Evidence = evidence(history, &sc, p, now)
	last := sc.last
	ev := &v.Evidence
	probeSlow, probeFailed := probeVerdict(history, p)
	if probeFailed {
		// The body says why (e.g. "The model `x` does not exist"), and
		// stays the same from one failure to the next.
		o := lastFinishedProbe(history).Observation
		ev.ProbeFailing = outcome(o)
		if o.Error != "" && o.Class != probes.ClassTimeout {
			ev.ProbeFailing = o.Error
		}
	}
	// tail is said after every reason: the probe failing for a reason
	// other than load, and what is odd about a serving engine.
	tail := func() string {
		var b strings.Builder
		if ev.ProbeFailing != "" {
			fmt.Fprintf(&b, "; probe failing: %s (not load: check engine.model and the engine's log)", ev.ProbeFailing)
		}
		for _, o := range ev.Odd {
			b.WriteString("; odd: " + o)
		}
		return b.String()
	}
	say := func(state State, format string, a ...any) Verdict {
		v.State = state
		v.Reason = fmt.Sprintf(format, a...) + tail()
		return v
	}

	// loading
	grace := graceEnd(history, p)
	if now.Before(grace) {
		return say(StateLoading, "LOADING: engine (re)started %s ago, not serving yet (/v1/models %s); grace ends in %s; not restarting",
			humanize.Duration(now.Sub(p.LastStart)), ev.Models, humanize.Duration(p.LastStart.Add(p.StartupGrace).Sub(now)))
	}

	// down: only samples taken outside the grace count, so an engine
	// refusing while it loads, then failing once as it comes up, is not
	// down. Any sign of serving in those samples vetoes it.
	if n := max(p.DownAfter, 1); len(history) >= n {
		first := &history[len(history)-n]
		down := !first.At.Before(grace)
		for i := len(history) - n; i < len(history) && down; i++ {
			down = engineDown(&history[i])
		}
		if down {
			proof := servedSince(history, &sc, first.At)
			if proof == "" {
				loading := ""
				if saysLoading(last) {
					loading = "; the engine says it is loading the model"
				}
				return say(StateDown, "DOWN: /health %s, /v1/models %s on %d consecutive samples%s",
					ev.Health, ev.Models, n, loading)
			}
			ev.Odd = append(ev.Odd, fmt.Sprintf("looks down (/health %s, /v1/models %s) but %s: not down",
				outcome(last.Health), outcome(last.Models.Observation), proof))
		}
	}
	if len(ev.Odd) == 0 {
		ev.Odd = oddEndpoints(last)
	}

	// misconfigured
	if o := last.unauthorized(); o != nil {
		return say(StateMisconfigured, "MISCONFIGURED: %s answered %d: the engine API key is wrong or missing (engine.api_key); paging, never restarting",
			o.Endpoint, o.Code)
	}

	// asleep on purpose (vLLM's sleep mode): frozen counters and a probe
	// that waits are what sleep is; the engine said so in an answer, so
	// it is not wedged either.
	if last.Asleep {
		return say(StateLoading, "LOADING (asleep): the engine says it was put to sleep on purpose (%s true); progress not judged until it wakes; %s waiting, %s running; not restarting",
			probes.EndpointSleeping, humanize.Count(ev.Waiting), humanize.Count(ev.Running))
	}

	// hung: a wedged API server answers nothing, so its /metrics is
	// unreadable; this comes before the unreadable-scrape rule.
	// Unless the engine sent bytes of its answers through vigil's limiter
	// meanwhile: its API server is starved under load, not wedged, and a
	// restart would cut the calls it serves.
	if w := sc.wedge; p.reached(w.For) {
		if silent := w.Silent(now); !p.reached(silent) {
			return say(StateSaturated, "SATURATED: API server timing out (no answer from /v1/models, /health or /metrics for %s) but %s calls answered through vigil in the last %s, %s: not hung; %s queued at the limiter; probe %s; not restarting",
				humanize.Duration(w.For), humanize.Count(float64(w.Answered)), humanize.Duration(w.For), bytesAgo(silent),
				humanize.Count(float64(ev.LimiterQueued)), ev.Probe)
		}
		ev.Hang, ev.Unanswered = HangWedged, w.For
		through := ""
		if w.Limited {
			through = fmt.Sprintf("; no byte through vigil's limiter for %s either", humanize.Duration(w.Silent(now)))
		}
		return say(StateHung, "HUNG (wedged API server): no answer at all from /v1/models, /health or /metrics for %s (timeouts, not refusals)%s; probe %s",
			humanize.Duration(w.For), through, ev.Probe)
	}

	if !last.readable() {
		why := last.Metrics.Error
		if why == "" {
			why = last.Metrics.Observation.String()
		}
		if k, ok := flakyScrape(history); ok && sc.wedge.For == 0 && onlyMetricsFailed(last) {
			// One bad scrape among good ones says nothing new about
			// progress: the verdict stands as of the last readable scrape,
			// so a flaky /metrics neither flips it nor pages.
			c := Classify(history[:k+1], p, history[k].At)
			c.At = now
			c.Evidence.MetricsError = why
			c.Reason += fmt.Sprintf("; last scrape unreadable (%s): verdict as of the readable scrape %s before",
				why, humanize.Duration(now.Sub(history[k].At)))
			return c
		}
		if sc.wedge.For > 0 {
			return say(StateUnknown, "UNKNOWN: no endpoint has answered for %s (timeouts; hung as a wedged API server at %s); probe %s; not restarting",
				humanize.Duration(sc.wedge.For), humanize.Duration(p.HangAfter), ev.Probe)
		}
		return say(StateUnknown, "UNKNOWN: /metrics unreadable (%s); progress cannot be judged; probe %s; not restarting",
			why, ev.Probe)
	}

	m := last.Metrics.Metrics
	modelsAlive := last.Models.Class != probes.ClassRefused && last.Models.Class != probes.ClassReset

	// hung: the whole engine. A probe that started after the counters
	// froze and completed proves the engine served and /metrics is stale;
	// it proves so for hang_after after it completed, and from then on the
	// probes alone judge (stale metrics cannot hide a hang for longer).
	stale := false
	if sc.pending && modelsAlive && p.reached(sc.stall) {
		done, proved := probeCompletedSince(history, now.Add(-(sc.stall + sc.paused)))
		switch {
		case proved && !p.reached(now.Sub(done)):
			stale = true
			ev.Stale = now.Sub(sc.lastMove)
		case proved:
			ev.Hang, ev.Stale = HangEngine, now.Sub(sc.lastMove)
			ev.Stalled = now.Sub(done)
			return say(StateHung, "HUNG: no probe has completed for %s while /metrics stayed unchanged for %s (stale: probes completed after the counters froze), %s; /v1/models %s; probe %s",
				humanize.Duration(now.Sub(done)), humanize.Duration(ev.Stale), pendingWork(m, last), ev.Models, ev.Probe)
		default:
			ev.Hang = HangEngine
			ranks := ""
			if hung := hungRanks(ev.Ranks); len(hung) > 0 && len(hung) < len(ev.Ranks) {
				// The others went idle: every client ended up waiting on
				// the frozen rank, so the sums froze too.
				ranks = fmt.Sprintf(" (data-parallel rank %s of %d frozen with work, the others idle)", rankList(hung), len(ev.Ranks))
			}
			return say(StateHung, "HUNG: no progress for %s with %s%s; /v1/models %s; probe %s",
				noProgress(&sc), pendingWork(m, last), ranks, ev.Models, ev.Probe)
		}
	}
	if stale {
		// Judged by the probes alone: the gauges are as old as the counters.
		why := fmt.Sprintf("/metrics unchanged for %s while probes complete (stale: a cache or a stuck exporter?), judged by the probe", humanize.Duration(ev.Stale))
		if probeSlow {
			return say(StateSaturated, "SATURATED: %s; probe %s (SLO %s); not restarting", why, ev.Probe, humanize.Duration(p.ProbeSLO))
		}
		ev.Odd = append(ev.Odd, "/metrics stale: unchanged while probes complete")
		if !probeFailed {
			return say(StateHealthy, "HEALTHY: %s; probe %s", why, ev.Probe)
		}
	}

	// hung: one data-parallel rank.
	if hung := hungRanks(ev.Ranks); len(hung) > 0 && p.HangAfter > 0 {
		ev.Hang = HangRank
		var parts []string
		for _, r := range hung {
			parts = append(parts, fmt.Sprintf("rank %s of %d: no progress for %s with %s pending",
				r.Rank, len(ev.Ranks), humanize.Duration(r.Stalled), humanize.Count(r.Waiting+r.Running)))
		}
		return say(StateHung, "HUNG (data-parallel rank): %s; the other ranks %s; probe %s",
			strings.Join(parts, "; "), othersDoing(ev.Ranks), ev.Probe)
	}

	// hung: decode stalled while prefill goes on.
	if sc.decode.Stalled(p.HangAfter - p.Tolerance) {
		ev.Hang = HangDecode
		still := "first tokens less finishes and aborts"
		if !sc.decode.AbortsKnown {
			still = "first tokens less finishes; the engine counts no aborts"
		}
		return say(StateHung, "HUNG (decode stalled): no decode token for %s while %s requests got their first token since, at least %s of them still waiting (%s) (prefill goes on, nobody gets a second token); %s running, %s waiting; probe %s",
			humanize.Duration(sc.decode.Stall), humanize.Count(sc.decode.FirstTokens), humanize.Count(sc.decode.Owed), still,
			humanize.Count(m.Running), humanize.Count(m.Waiting), ev.Probe)
	}

	// saturated at the limiter: it sheds or queues while the engine,
	// kept shallow by it, shows nothing.
	deep := p.SaturatedWaiting > 0 && m.Waiting >= float64(p.SaturatedWaiting)
	if sc.prevReadable != nil && !deep && !probeSlow && limiterSaturated(ev, p) {
		ev.LimiterOnly = true
		what := fmt.Sprintf("shedding %.0f%% of %s calls in the last %d cycles, %s queued in vigil",
			100*ev.ShedRate, humanize.Count(float64(ev.ShedCalls)), shedCycles, humanize.Count(float64(ev.LimiterQueued)))
		if ev.ShedRate < p.SaturatedShed || p.SaturatedShed == 0 {
			what = fmt.Sprintf("%s calls queued in vigil (shedding %.0f%%)", humanize.Count(float64(ev.LimiterQueued)), 100*ev.ShedRate)
		}
		return say(StateSaturated, "SATURATED at the limiter: %s; the engine shallow (%s waiting, %s running, %s tok/s); not restarting",
			what, humanize.Count(m.Waiting), humanize.Count(m.Running), humanize.Count(ev.TokensPerSec))
	}

	// saturated
	if sc.prevReadable != nil && sc.moving && (deep || probeSlow) {
		var b strings.Builder
		fmt.Fprintf(&b, "SATURATED: %s waiting, %s running, %s tok/s, counters +%s in %s",
			humanize.Count(m.Waiting), humanize.Count(m.Running), humanize.Count(ev.TokensPerSec), humanize.Count(ev.ProgressDelta), humanize.Duration(ev.Window))
		if ev.DrainEstimate > 0 {
			fmt.Fprintf(&b, "; est. drain %s", humanize.Estimate(ev.DrainEstimate))
		}
		if probeSlow {
			fmt.Fprintf(&b, "; probe %s (SLO %s)", ev.Probe, humanize.Duration(p.ProbeSLO))
		}
		b.WriteString("; not restarting")
		return say(StateSaturated, "%s", b.String())
	}

	// healthy
	idle := sc.pendingKnown && !sc.pending
	if (idle || (sc.prevReadable != nil && sc.moving)) && !probeSlow && !probeFailed {
		if !p.ProofSince.IsZero() && servedSince(history, &sc, p.ProofSince) == "" {
			return say(StateUnknown, "UNKNOWN: %s waiting, %s running, but the engine was hung or down %s ago and has shown no sign of serving since (no counter rising, no probe completed); waiting for one before resolving; probe %s",
				humanize.Count(m.Waiting), humanize.Count(m.Running), humanize.Duration(now.Sub(p.ProofSince)), ev.Probe)
		}
		var reason string
		if idle {
			reason = fmt.Sprintf("HEALTHY: idle (0 waiting, 0 running); /v1/models %s; probe %s", ev.Models, ev.Probe)
		} else {
			reason = fmt.Sprintf("HEALTHY: %s waiting, %s running, %s tok/s; probe %s",
				humanize.Count(m.Waiting), humanize.Count(m.Running), humanize.Count(ev.TokensPerSec), ev.Probe)
		}
		if sc.reset {
			reason += "; counters reset (engine restarted), re-baselined"
		}
		return say(StateHealthy, "%s", reason)
	}

	// unknown
	switch {
	case sc.prevReadable == nil:
		return say(StateUnknown, "UNKNOWN: first readable scrape, progress cannot be judged yet; %s waiting, %s running; probe %s",
			humanize.Count(m.Waiting), humanize.Count(m.Running), ev.Probe)
	case !sc.moving && sc.pending && sc.stall < p.HangAfter:
		return say(StateUnknown, "UNKNOWN: no progress for %s with %s (hung at %s); /v1/models %s; probe %s; not restarting",
			noProgress(&sc), pendingWork(m, last), humanize.Duration(p.HangAfter), ev.Models, ev.Probe)
	case probeFailed && sc.moving:
		return say(StateUnknown, "UNKNOWN: %s waiting, %s running, counters moving (%s tok/s); not restarting",
			humanize.Count(m.Waiting), humanize.Count(m.Running), humanize.Count(ev.TokensPerSec))
	case probeFailed:
		return say(StateUnknown, "UNKNOWN: %s waiting, %s running, counters unchanged; not restarting",
			humanize.Count(m.Waiting), humanize.Count(m.Running))
	}
	return say(StateUnknown, "UNKNOWN: %s waiting, %s running, %s tok/s; probe %s; not restarting",
		humanize.Count(m.Waiting), humanize.Count(m.Running), humanize.Count(ev.TokensPerSec), ev.Probe)
}

// pauseWorthSaying is the least pause of vigil's own a stall's reason
// names: shorter ones are the pause meter's tick (its noise floor).
const pauseWorthSaying = 10 * time.Millisecond

// noProgress is how long no progress signal moved with work pending, and
// how much of that vigil itself was paused when it mattered: the stall
// judged against hang_after is the difference.
func noProgress(sc *scan) string {
	if sc.paused < pauseWorthSaying {
		return humanize.Duration(sc.stall + sc.paused)
	}
	return fmt.Sprintf("%s, of which vigil was paused %s,", humanize.Duration(sc.stall+sc.paused), humanize.Duration(sc.paused))
}

// shedCycles is how many cycles back the limiter's shed rate looks, and
// minShedCalls the calls it needs in that time to judge.
const (
	shedCycles   = 4
	minShedCalls = 20
)

// shedding fills the limiter's share of the evidence from the samples.
func shedding(history []Sample, ev *Evidence) {
	last := history[len(history)-1].Limiter
	if last == nil {
		return
	}
	ev.LimiterQueued = last.Queued
	for i := max(len(history)-1-shedCycles, 0); i < len(history)-1; i++ {
		base := history[i].Limiter
		if base == nil || last.Calls < base.Calls || last.Shed < base.Shed {
			continue
		}
		if calls := last.Calls - base.Calls; calls > 0 {
			ev.ShedCalls = calls
			ev.ShedRate = float64(last.Shed-base.Shed) / float64(calls)
		}
		return
	}
}

// limiterSaturated: the limiter sheds at least saturated_shed of enough
// calls, or holds saturated_waiting calls in its queue.
func limiterSaturated(ev *Evidence, p Params) bool {
	if p.SaturatedShed > 0 && ev.ShedCalls >= minShedCalls && ev.ShedRate >= p.SaturatedShed {
		return true
	}
	return p.SaturatedWaiting > 0 && ev.LimiterQueued >= p.SaturatedWaiting
}

// maxFlaky is the longest run of unreadable scrapes at the end of the
// history that still counts as a flaky /metrics rather than a lost one.
const maxFlaky = 2

// flakyScrape reports whether the history ends in a short run (at most
// maxFlaky) of unreadable scrapes after a readable one, and that one's index.
func flakyScrape(history []Sample) (k int, ok bool) {
	for i := len(history) - 1; i >= 0 && i >= len(history)-1-maxFlaky; i-- {
		if history[i].readable() {
			return i, i < len(history)-1
		}
	}
	return 0, false
}

// saysLoading: an endpoint's error body says the model is loading (vLLM
// and the gateways in front of it answer 503 "model is loading").
func saysLoading(s *Sample) bool {
	for _, o := range []probes.Observation{s.Models.Observation, s.Health, s.Metrics.Observation, s.Probe.Observation} {
		if strings.Contains(strings.ToLower(o.Error), "loading") {
			return true
		}
	}
	return false
}

// onlyMetricsFailed: at this sample /v1/models served a model list and
// /health (when probed) answered 200, so a bad scrape is /metrics' own
// trouble, not the engine's.
func onlyMetricsFailed(s *Sample) bool {
	return s.Models.OK() && (!s.Health.Taken() || s.Health.OK())
}

// engineDown: the engine itself is down at this sample, not one endpoint:
// /health refused, reset or 5xx (vLLM answers 503 once its engine core is
// dead), or /v1/models and /metrics both refused, reset or 5xx.
func engineDown(s *Sample) bool {
	if s.Health.Taken() && s.Health.Unreachable() {
		return true
	}
	return s.Models.Unreachable() && s.Metrics.Unreachable()
}

// oddEndpoints names the endpoints answering 5xx or refusing on an engine
// that is not down: worth a word in the page, never a restart.
func oddEndpoints(s *Sample) []string {
	var odd []string
	for _, o := range []probes.Observation{s.Models.Observation, s.Health, s.Metrics.Observation} {
		if o.Taken() && o.Unreachable() {
			odd = append(odd, fmt.Sprintf("%s answers %s while the engine is not down", o.Endpoint, outcome(o)))
		}
	}
	return odd
}

// outcome is an observation's result without its latency, so that the
// same fault reads the same from one sample to the next (pages about it
// are sent once, not every cycle).
func outcome(o probes.Observation) string {
	switch o.Class {
	case probes.ClassNone, probes.ClassHTTPStatus:
		if !o.Taken() {
			return "not probed"
		}
		return strings.TrimSpace(fmt.Sprint(o.Code, " ", http.StatusText(o.Code)))
	case probes.ClassTimeout:
		return "timeout"
	case probes.ClassRefused:
		return "refused"
	case probes.ClassReset:
		return "reset (empty reply)"
	}
	return "failed: " + o.Error
}

// bytesAgo says when the engine last sent bytes through the limiter, as
// seen at the samples.
func bytesAgo(silent time.Duration) string {
	if silent <= 0 {
		return "bytes flowing at the last sample"
	}
	return "last bytes " + humanize.Duration(silent) + " ago"
}

// servedSince names positive evidence that the engine served at or after
// t: counters rising (a reset is a restart, not service), or a probe
// sent at or after t completing. "" when there is none.
func servedSince(history []Sample, sc *scan, t time.Time) string {
	if !sc.lastGrowth.IsZero() && !sc.lastGrowth.Before(t) {
		return "counters rise"
	}
	if _, ok := probeCompletedSince(history, t); ok {
		return "probes complete"
	}
	return ""
}

// probeCompletedSince is when the latest completion probe sent at or after
// t completed; ok is false when none did.
func probeCompletedSince(history []Sample, t time.Time) (done time.Time, ok bool) {
	for i := len(history) - 1; i >= 0; i-- {
		if pr := history[i].Probe; pr.State == probes.ProbeOK && !pr.Started.Before(t) {
			return pr.Started.Add(pr.Latency), true
		}
	}
	return time.Time{}, false
}

// pendingWork says what is pending, naming vigil's own probe when it is
// the only work: "0 waiting, 0 running" alone reads as idle.
func pendingWork(m *probes.Metrics, last *Sample) string {
	if m.Waiting+m.Running == 0 && last.Probe.Pending() {
		return "only vigil's probe pending (0 waiting, 0 running)"
	}
	return fmt.Sprintf("%s waiting, %s running", humanize.Count(m.Waiting), humanize.Count(m.Running))
}

// lastFinishedProbe is the most recent probe that finished.
func lastFinishedProbe(history []Sample) probes.CompletionStatus {
	for i := len(history) - 1; i >= 0; i-- {
		if s := history[i].Probe; s.State != probes.ProbeOutstanding && s.State != probes.ProbeIdle {
			return s
		}
	}
	return history[len(history)-1].Probe
}

func hungRanks(ranks []RankEvidence) []RankEvidence {
	var hung []RankEvidence
	for _, r := range ranks {
		if r.Hung {
			hung = append(hung, r)
		}
	}
	return hung
}

func rankList(ranks []RankEvidence) string {
	ids := make([]string, len(ranks))
	for i, r := range ranks {
		ids[i] = r.Rank
	}
	return strings.Join(ids, ", ")
}

// othersDoing says what the ranks that are not hung do.
func othersDoing(ranks []RankEvidence) string {
	moving, idle := 0, 0
	for _, r := range ranks {
		switch {
		case r.Hung:
		case r.Waiting+r.Running == 0:
			idle++
		default:
			moving++
		}
	}
	return fmt.Sprintf("serve (%d moving, %d idle)", moving, idle)
}

// graceEnd is when the startup grace ended or ends: StartupGrace after
// LastStart, or earlier, at the first sample since LastStart where the API
// server answered /v1/models (a model list, or a 4xx such as 401: either
// way it is up; at LastStart itself if it served before the history
// began). Zero means no grace at all.
func graceEnd(history []Sample, p Params) time.Time {
	if p.LastStart.IsZero() {
		return time.Time{}
	}
	end := p.LastStart.Add(p.StartupGrace)
	for i := range history {
		if s := &history[i]; !s.At.Before(p.LastStart) && answered(s.Models.Observation) {
			if s.At.Before(end) {
				end = s.At
			}
			return end
		}
	}
	if !p.LastReady.IsZero() && !p.LastReady.Before(p.LastStart) {
		return p.LastStart
	}
	return end
}

// answered: the API server is up and answering, whatever it said.
func answered(o probes.Observation) bool {
	return o.OK() || (o.Class == probes.ClassHTTPStatus && o.Code < 500)
}

// probeVerdict reads the completion probe across samples. slow: it timed
// out, is outstanding past the SLO, or finished past it; an outstanding
// probe still within its SLO inherits the last finished probe's outcome,
// so one slow probe's verdict does not flicker while its successor runs.
// failed: the last finished probe got an error other than a timeout.
func probeVerdict(history []Sample, p Params) (slow, failed bool) {
	cur := history[len(history)-1].Probe
	judge := func(s probes.CompletionStatus) (slow, failed bool) {
		switch s.State {
		case probes.ProbeTimedOut:
			return true, false
		case probes.ProbeOK:
			return p.ProbeSLO > 0 && s.Latency > p.ProbeSLO, false
		case probes.ProbeFailed:
			// Refused or reset is the port, not the model: the down rule
			// judges that from /health and /v1/models. Counted here, a
			// probe sent while a restarted engine was still loading would
			// taint the first verdicts after it serves again.
			if s.Class == probes.ClassRefused || s.Class == probes.ClassReset {
				return false, false
			}
			// A 5xx is the engine speaking of itself (503 "model is
			// loading", a crashed core): the down and hang rules judge it,
			// and it is no sign of a wrong engine.model.
			if s.Class == probes.ClassHTTPStatus && s.Code >= 500 {
				return false, false
			}
			return false, true
		}
		return false, false
	}
	if cur.State != probes.ProbeOutstanding {
		return judge(cur)
	}
	if p.ProbeSLO > 0 && cur.Age > p.ProbeSLO {
		return true, false
	}
	// The last finished probe speaks for the one in flight (none finished:
	// judge sees the outstanding one and says neither). A probe that
	// failed (not by load) stays failing while its successor runs: the
	// fault is the configuration, not this try.
	return judge(lastFinishedProbe(history))
}

// evidence fills what vigil saw for a verdict.
func evidence(history []Sample, sc *scan, p Params, now time.Time) Evidence {
	last := sc.last
	ev := Evidence{
		Models:       last.Models.String(),
		Health:       last.Health.String(),
		Probe:        last.Probe.String(),
		ProbeLatency: last.Probe.Elapsed(),
		Stalled:      sc.stall,
		Paused:       sc.paused,
		LongestGap:   max(sc.longestGap, sc.stall),
		CounterReset: sc.reset,
	}
	if !last.Metrics.Readable() {
		ev.MetricsError = last.Metrics.Error
		if ev.MetricsError == "" {
			ev.MetricsError = last.Metrics.Observation.String()
		}
	}
	if sc.lastReadable != nil {
		ev.SinceProgress = now.Sub(sc.lastMove)
	}
	if last.readable() {
		m := last.Metrics.Metrics
		ev.Waiting, ev.Running = m.Waiting, m.Running
	}
	r := sc.rates(history, p.RateWindow)
	ev.Window, ev.Samples, ev.NoRates = r.window, max(r.samples, 1), r.samples < 2
	ev.ProgressDelta = r.progress
	ev.TokensPerSec = r.perSecond(r.progress)
	if len(r.heartbeats) > 0 {
		ev.HeartbeatDeltas = r.heartbeats
	}
	for _, rk := range sc.ranks {
		ev.Ranks = append(ev.Ranks, RankEvidence{Rank: rk.ID, Waiting: rk.Waiting, Running: rk.Running,
			Stalled: rk.Stall, Hung: rk.Pending() && p.reached(rk.Stall)})
	}
	if sc.decode.FirstTokens > 0 {
		ev.DecodeStalled = sc.decode.Stall
	}
	ev.Unanswered = sc.wedge.For
	if sc.wedge.Limited {
		ev.ThroughVigil = &ThroughVigil{Answered: sc.wedge.Answered, Silent: sc.wedge.Silent(now)}
	}
	ev.HangAfter, ev.HangAfterWhy, ev.HangAfterFrom = p.HangAfter, p.WindowWhy, p.WindowFrom
	shedding(history, &ev)
	ev.Serving = (sc.moving && !sc.reset) || last.Probe.State == probes.ProbeOK
	switch d, ok := r.extra[probes.MetricRequestSuccess]; {
	case ok:
		ev.CompletionsPerSec, ev.CompletionsKnown = r.perSecond(d), true
		if ev.CompletionsPerSec > 0 && ev.Waiting > 0 {
			ev.DrainEstimate = time.Duration(ev.Waiting / ev.CompletionsPerSec * float64(time.Second))
		}
	case r.answeredKnown && r.window > 0:
		// The engine counts no finished requests (llama.cpp), but the
		// limiter in front counts the calls it answered: a true rate
		// of the calls through vigil, said to be that, where the
		// engine's own would be unknown.
		ev.CompletionsPerSec, ev.CompletionsKnown, ev.CompletionsThroughVigil = r.perSecond(r.answered), true, true
	}
	return ev
}
