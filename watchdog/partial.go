package watchdog

import (
	"sort"
	"time"

	"github.com/vigil-dev/vigil/probes"
)

// Partial failures: the engine keeps answering /health and its summed
// token counters keep moving, yet part of it is stuck. Each scan below
// looks for one kind in the history, so Classify can call it hung although
// the whole-engine rules see progress. Every one of them measures time the
// way scanHistory does: time under unreadable scrapes does not count.

// rankScan is one data-parallel rank (a value of the rank label): how long
// its own counters have been frozen while its own queues held work.
type rankScan struct {
	ID      string
	Waiting float64
	Running float64
	// Stall is how long none of the rank's counters moved while it had
	// work pending; zero when it is idle or moving.
	Stall time.Duration
}

// Pending reports whether the rank had work at the last scrape.
func (r rankScan) Pending() bool { return r.Waiting+r.Running > 0 }

// scanRanks follows each rank across the readable samples that split by
// rank. A rank is first seen as its own baseline; a counter of the rank
// that goes down re-baselines it (the engine restarted). A readable scrape
// with no split (one engine) forgets every rank.
func scanRanks(history []Sample, spans []span, now time.Time) []rankScan {
	type track struct {
		lastMove, pendingSince time.Time
		last                   *probes.Rank
	}
	tracks := map[string]*track{}
	var lastRanks map[string]*probes.Rank
	for i := range history {
		s := &history[i]
		if !s.readable() {
			continue
		}
		ranks := s.Metrics.Metrics.Ranks
		lastRanks = ranks
		if ranks == nil {
			clear(tracks)
			continue
		}
		for id, r := range ranks {
			t := tracks[id]
			if t == nil {
				t = &track{lastMove: s.At}
				tracks[id] = t
			} else if moved, reset := compareCounters(t.last.Counters, r.Counters); moved || reset {
				t.lastMove = s.At
			}
			t.last = r
			switch {
			case r.Waiting+r.Running <= 0:
				t.pendingSince = time.Time{}
			case t.pendingSince.IsZero():
				t.pendingSince = s.At
			}
		}
	}
	out := make([]rankScan, 0, len(lastRanks))
	for id, r := range lastRanks {
		t := tracks[id]
		rs := rankScan{ID: id, Waiting: r.Waiting, Running: r.Running}
		if !t.pendingSince.IsZero() {
			rs.Stall = frozenFor(latest(t.lastMove, t.pendingSince), now, spans)
		}
		out = append(out, rs)
	}
	sort.Slice(out, func(i, j int) bool { return rankLess(out[i].ID, out[j].ID) })
	return out
}

// rankLess sorts "2" before "10": rank labels are numbers in vLLM.
func rankLess(a, b string) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// decodeScan is the decode-stall rule's view: since decode tokens last
// moved, have requests been given a first token and then left owing a
// decode step?
type decodeScan struct {
	// Known: the engine exports the decode counters.
	Known bool
	// Stall is how long decode has been owed and frozen: from the first
	// sample at which requests were proven owed (see Owed) since decode
	// tokens last moved.
	Stall time.Duration
	// FirstTokens is how many first tokens were given after decode was
	// first owed; a stall needs at least one (the engine admits and
	// prefills, but nobody gets a second token).
	FirstTokens float64
	// Owed is how many requests are proven to wait for a second token at
	// the last scrape (scanDecode): first tokens less the requests
	// finished and (where the engine counts them) aborted. Every abort is
	// taken off, since any of them may be a request that had its first
	// token, so this never counts a request whose client left: an engine
	// whose callers all give up between their first and second token (the
	// queue as long as their patience) steps on, and is not stalled.
	Owed float64
	// Running is the running gauge at the last scrape.
	Running float64
	// AbortsKnown: the engine counts aborted requests.
	AbortsKnown bool
}

// Stalled reports a decode stall of at least hangAfter.
func (d decodeScan) Stalled(hangAfter time.Duration) bool {
	return d.Known && hangAfter > 0 && d.Stall >= hangAfter && d.FirstTokens > 0 && d.Running > 0 && d.Owed > 0
}

// decodeTolerance is how far decode tokens (generation less first tokens)
// may rise over the base and still count as not moving. The two counters
// are read a moment apart, so their difference wobbles by the first tokens
// given in between, either way; a decode that really moves gives every
// running request a token per step and leaves this far behind within a
// few seconds.
const decodeTolerance = 8

// scanDecode walks the readable samples once. Decode is frozen since
// the base, the last sample at which decode tokens moved; requests are
// owed while some request that got a first token is proven still there.
//
// The proof: let x = first tokens - finishes - aborts, cumulative. Any
// request that got a first token after an earlier sample T and is gone
// finished or was aborted after T, so at least x(now) - x(T) requests
// with a first token are still there (an abort of a request that never
// had one only makes this smaller), and the best bound is x(now) less
// the least x seen since the counters last reset. It reaches back past
// the base: requests that got their first token in the very interval in
// which decode last moved, and never a second, are counted too. A
// max_tokens=1 workload finishes what it gives a first token, a long
// prefill gives none, callers who all leave between their first and
// second token leave nothing owed; none of them is a stall.
//
// Without an abort count (an engine that has no finished_reason="abort"
// series) an abort cannot be told from a request still waiting; the rule
// then counts first tokens less finishes since the base, as it always
// did, and a stall also needs first tokens given after it began and
// requests still running.
func scanDecode(history []Sample, spans []span, now time.Time) decodeScan {
	var (
		base       *probes.DecodeCounters
		owedSince  time.Time
		owedFirsts float64
		owed       float64
		least      float64 // the least x since the counters last reset
		last       *probes.Metrics
	)
	x := func(d *probes.DecodeCounters) float64 { return d.FirstTokens - d.Finished - d.Aborted }
	for i := range history {
		s := &history[i]
		if !s.readable() {
			continue
		}
		last = s.Metrics.Metrics
		d := last.Decode
		switch {
		case d == nil:
			base, owedSince, owed = nil, time.Time{}, 0
			continue
		case base == nil, d.FirstTokens < base.FirstTokens, d.Finished < base.Finished, d.Aborted < base.Aborted:
			base, owedSince, owed, least = d, time.Time{}, 0, x(d)
			continue
		}
		least = min(least, x(d))
		if d.DecodeTokens() > base.DecodeTokens()+decodeTolerance {
			base, owedSince, owed = d, time.Time{}, 0
			continue
		}
		if d.AbortsKnown && base.AbortsKnown {
			owed = x(d) - least
		} else {
			owed = (d.FirstTokens - base.FirstTokens) - (d.Finished - base.Finished)
		}
		switch {
		case owed <= 0:
			owedSince, owed = time.Time{}, 0
		case owedSince.IsZero():
			owedSince, owedFirsts = s.At, d.FirstTokens
		}
	}
	if last == nil || last.Decode == nil {
		return decodeScan{}
	}
	ds := decodeScan{Known: true, Running: last.Running, AbortsKnown: last.Decode.AbortsKnown}
	if !owedSince.IsZero() {
		// vigil's probe asks for two tokens: one sent after decode was
		// owed that completed had a decode step, whatever the counters
		// say (an engine whose abort series does not count the callers
		// who left keeps them owed for ever). Decode is timed from there.
		if done, ok := probeCompletedSince(history, owedSince); ok && done.After(owedSince) {
			owedSince = done
		}
		ds.Stall = frozenFor(owedSince, now, spans)
		ds.FirstTokens = last.Decode.FirstTokens - owedFirsts
		ds.Owed = owed
	}
	return ds
}

// wedgeScan: the API server accepts connections and answers nothing.
type wedgeScan struct {
	// For is how long every endpoint has timed out with no answer at all
	// (counted from the first such sample); zero when something answered
	// at the last sample.
	For time.Duration
	// The limiter's side of the run, when its counts are in its samples
	// (Limited): Served is the last sample at which the engine had sent
	// bytes of its answers through the limiter since the sample before
	// (zero: none in the run), Answered the calls it answered through the
	// limiter over the run. An API server that times out on every probe
	// while the engine serves vigil's calls is starved, not wedged.
	Limited  bool
	Served   time.Time
	Answered uint64
}

// Silent is how long nothing at all came from the engine: no endpoint
// answered, and no byte of any answer through the limiter.
func (w wedgeScan) Silent(now time.Time) time.Duration {
	if w.For == 0 || w.Served.IsZero() {
		return w.For
	}
	return now.Sub(w.Served)
}

// answeredAny reports whether any endpoint gave an HTTP answer (any
// status) at this sample, or failed in a way that is not a timeout.
func answeredAny(s *Sample) bool {
	for _, o := range []probes.Observation{s.Models.Observation, s.Health, s.Metrics.Observation} {
		if !o.Taken() || o.Class != probes.ClassTimeout {
			return true
		}
	}
	return false
}

// scanWedge finds the current run of samples at which /v1/models, /health
// and /metrics all timed out. A completion probe that got any HTTP answer
// during the run ends it: a server that answers late is starved, not
// wedged, and the probe's long timeout is what hears it.
func scanWedge(history []Sample, now time.Time) wedgeScan {
	since := time.Time{}
	for i := range history {
		s := &history[i]
		if answeredAny(s) {
			since = time.Time{}
			continue
		}
		if since.IsZero() {
			since = s.At
		}
	}
	if since.IsZero() {
		return wedgeScan{}
	}
	for i := range history {
		p := history[i].Probe
		if history[i].At.Before(since) || p.State == probes.ProbeOutstanding || p.State == probes.ProbeIdle {
			continue
		}
		if p.Code != 0 && !p.Started.Add(p.Latency).Before(since) {
			return wedgeScan{}
		}
	}
	ws := wedgeScan{For: now.Sub(since)}
	for i := 1; i < len(history); i++ {
		a, b := history[i-1].Limiter, history[i].Limiter
		// Counts that went down are another limiter's (vigil restarted):
		// no evidence either way.
		if history[i].At.Before(since) || a == nil || b == nil || b.EngineReads < a.EngineReads || b.Answered < a.Answered {
			continue
		}
		ws.Limited = true
		if b.EngineReads > a.EngineReads {
			ws.Served = history[i].At
		}
		ws.Answered += b.Answered - a.Answered
	}
	return ws
}

// compareCounters reports whether any counter present in both maps moved,
// and whether any went down.
func compareCounters(a, b map[string]float64) (moved, reset bool) {
	for name, va := range a {
		vb, ok := b[name]
		if !ok {
			continue
		}
		if vb != va {
			moved = true
		}
		if vb < va {
			reset = true
		}
	}
	return moved, reset
}

// unreadableSpans lists the time each unreadable sample after the last
// readable one covers. Earlier unreadable scrapes are bracketed by
// readable ones: counters only rise, so equal readings on both sides
// prove nothing moved in between and the gap counts as frozen, while a
// move on the far side restarts the clock there anyway. Only the trailing
// stretch is unproven, and it is taken off the clock.
func unreadableSpans(history []Sample) []span {
	last := -1
	for i := range history {
		if history[i].readable() {
			last = i
		}
	}
	var spans []span
	for i := max(last+1, 1); i < len(history); i++ {
		if !history[i].readable() {
			spans = append(spans, span{end: history[i].At, d: history[i].At.Sub(history[i-1].At)})
		}
	}
	return spans
}

// frozenFor is at-start less the time under unreadable scrapes between
// start and at.
func frozenFor(start, at time.Time, spans []span) time.Duration {
	d := at.Sub(start)
	for _, u := range spans {
		if !u.end.After(start) || u.end.After(at) {
			continue
		}
		d -= min(u.d, u.end.Sub(start))
	}
	return max(d, 0)
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
