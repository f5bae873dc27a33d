package watchdog

import (
	"fmt"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/probes"
)

// Classify turns the recent samples into a verdict, by DESIGN.md section
// 3, first match wins:
//
//   - loading: within StartupGrace after LastStart, never ready since;
//   - down: refused, reset/empty reply or 5xx from /health or /v1/models on
//     DownAfter consecutive samples, outside grace;
//   - misconfigured: a 401/403 from any endpoint;
//   - hung: /v1/models OK or timing out, and no progress signal moved for
//     HangAfter while work was pending (waiting + running > 0, or our
//     probe unanswered);
//   - saturated: progress moving, and waiting >= SaturatedWaiting or the
//     probe timed out or exceeded ProbeSLO;
//   - healthy: progress moving or idle, and the probe OK;
//   - unknown: anything else: the scrape is unreadable (never taken as
//     frozen), no earlier sample to compare with, the probe failing, or
//     progress stalled for less than HangAfter.
//
// A counter that goes down means the engine restarted: it counts as a move
// and rates restart from there. Classify is pure: history (oldest first),
// p and now are all it reads.
func Classify(history []Sample, p Params, now time.Time) Verdict {
	v := Verdict{At: now, State: StateUnknown}
	if len(history) == 0 {
		v.Reason = "UNKNOWN: no sample yet"
		return v
	}
	sc := scanHistory(history, now)
	v.Evidence = evidence(history, &sc, p, now)
	last := sc.last
	ev := &v.Evidence

	// loading
	grace := graceEnd(history, p)
	if now.Before(grace) {
		v.State = StateLoading
		v.Reason = fmt.Sprintf("LOADING: engine (re)started %s ago, not serving yet (/v1/models %s); grace ends in %s; not restarting",
			human(now.Sub(p.LastStart)), ev.Models, human(p.LastStart.Add(p.StartupGrace).Sub(now)))
		return v
	}

	// down: only samples taken outside the grace count, so an engine
	// refusing while it loads, then failing once as it comes up, is not
	// down.
	if n := max(p.DownAfter, 1); len(history) >= n {
		down := true
		for i := len(history) - n; i < len(history); i++ {
			s := &history[i]
			if s.At.Before(grace) || (!s.Health.Unreachable() && !s.Models.Unreachable()) {
				down = false
				break
			}
		}
		if down {
			v.State = StateDown
			v.Reason = fmt.Sprintf("DOWN: /health %s, /v1/models %s on %d consecutive samples; will drain and restart",
				ev.Health, ev.Models, n)
			return v
		}
	}

	// misconfigured
	if o := last.unauthorized(); o != nil {
		v.State = StateMisconfigured
		v.Reason = fmt.Sprintf("MISCONFIGURED: %s answered %d: the engine API key is wrong or missing (engine.api_key); paging, never restarting",
			o.Endpoint, o.Code)
		return v
	}

	if !last.readable() {
		why := last.Metrics.Error
		if why == "" {
			why = last.Metrics.Observation.String()
		}
		v.Reason = fmt.Sprintf("UNKNOWN: /metrics unreadable (%s); progress cannot be judged; probe %s; not restarting",
			why, ev.Probe)
		return v
	}

	m := last.Metrics.Metrics
	modelsAlive := last.Models.OK() || last.Models.Class == probes.ClassTimeout
	probeSlow, probeFailed := probeVerdict(history, p)

	// hung
	if sc.pending && modelsAlive && p.HangAfter > 0 && sc.stall >= p.HangAfter {
		v.State = StateHung
		v.Reason = fmt.Sprintf("HUNG: no progress for %s with %s waiting, %s running; /v1/models %s; probe %s; will drain and restart",
			human(sc.stall), count(m.Waiting), count(m.Running), ev.Models, ev.Probe)
		return v
	}

	// saturated
	deep := p.SaturatedWaiting > 0 && m.Waiting >= float64(p.SaturatedWaiting)
	if sc.prevReadable != nil && sc.moving && (deep || probeSlow) {
		v.State = StateSaturated
		var b strings.Builder
		fmt.Fprintf(&b, "SATURATED: %s waiting, %s running, %s tok/s, counters +%s in %s",
			count(m.Waiting), count(m.Running), count(ev.TokensPerSec), count(ev.ProgressDelta), human(ev.Window))
		if ev.DrainEstimate > 0 {
			fmt.Fprintf(&b, "; est. drain %s", approx(ev.DrainEstimate))
		}
		if probeSlow {
			fmt.Fprintf(&b, "; probe %s (SLO %s)", ev.Probe, human(p.ProbeSLO))
		}
		b.WriteString("; not restarting")
		v.Reason = b.String()
		return v
	}

	// healthy
	idle := sc.pendingKnown && !sc.pending
	if (idle || (sc.prevReadable != nil && sc.moving)) && !probeSlow && !probeFailed {
		v.State = StateHealthy
		if idle {
			v.Reason = fmt.Sprintf("HEALTHY: idle (0 waiting, 0 running); /v1/models %s; probe %s", ev.Models, ev.Probe)
		} else {
			v.Reason = fmt.Sprintf("HEALTHY: %s waiting, %s running, %s tok/s; probe %s",
				count(m.Waiting), count(m.Running), count(ev.TokensPerSec), ev.Probe)
		}
		if sc.reset {
			v.Reason += "; counters reset (engine restarted), re-baselined"
		}
		return v
	}

	// unknown
	switch {
	case sc.prevReadable == nil:
		v.Reason = fmt.Sprintf("UNKNOWN: first readable scrape, progress cannot be judged yet; %s waiting, %s running; probe %s",
			count(m.Waiting), count(m.Running), ev.Probe)
	case !sc.moving && sc.pending:
		v.Reason = fmt.Sprintf("UNKNOWN: no progress for %s with %s waiting, %s running (hung at %s); /v1/models %s; probe %s; not restarting",
			human(sc.stall), count(m.Waiting), count(m.Running), human(p.HangAfter), ev.Models, ev.Probe)
	case probeFailed:
		v.Reason = fmt.Sprintf("UNKNOWN: probe %s while counters move (%s tok/s); check engine.model; not restarting",
			ev.Probe, count(ev.TokensPerSec))
	default:
		v.Reason = fmt.Sprintf("UNKNOWN: %s waiting, %s running, %s tok/s; probe %s; not restarting",
			count(m.Waiting), count(m.Running), count(ev.TokensPerSec), ev.Probe)
	}
	return v
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
	for i := len(history) - 2; i >= 0; i-- {
		if s := history[i].Probe; s.State != probes.ProbeOutstanding && s.State != probes.ProbeIdle {
			slow, _ = judge(s)
			return slow, false
		}
	}
	return false, false
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
	ev.Window, ev.Samples = r.window, max(r.samples, 1)
	ev.ProgressDelta = r.progress
	ev.TokensPerSec = r.perSecond(r.progress)
	if len(r.heartbeats) > 0 {
		ev.HeartbeatDeltas = r.heartbeats
	}
	if d, ok := r.extra[probes.MetricRequestSuccess]; ok {
		ev.CompletionsPerSec = r.perSecond(d)
		if ev.CompletionsPerSec > 0 && ev.Waiting > 0 {
			ev.DrainEstimate = time.Duration(ev.Waiting / ev.CompletionsPerSec * float64(time.Second))
		}
	}
	return ev
}
