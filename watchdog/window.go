package watchdog

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/probes"
	"github.com/vigil-dev/vigil/util/humanize"
)

// The window in force (hang_after: auto). A fixed hang_after must cover
// the worst legitimate silence ever (one very long prompt prefilled alone
// moves no token counter until its first token), so it is minutes, while
// most of the time the longest legitimate silence is a second. The window
// is instead the longest silence the current work can cause, times a
// margin, between hang_after_min and hang_after_max:
//
//   - the longest prompt in flight through the limiter, at the engine's
//     prefill rate, plus a step: its prefill, and the decode steps its
//     chunks delay until it is done;
//   - work the limiter did not send (more in the engine than it admitted,
//     or no limiter in front): a prompt as long as the model's context
//     (max_model_len) at that rate, plus a step;
//   - a high quantile of the silences seen on this engine with work
//     pending (workLog, persisted);
//   - hang_after_max for what vigil cannot size: a prompt with no prefill
//     rate known, unsent work with no context length.
//
// The prefill rate counts only the prompt tokens the engine computed
// (prefix-cache hits left out, so a rate learned on cached prompts does
// not shorten the window of an uncached one). It is the engine's own where
// it exports a prefill-time figure (vLLM's histogram, llama.cpp's
// prompt_seconds_total): its prompt tokens over those seconds, the slower
// of the last ten minutes' and since it started, there from the first
// scrape, so no warm-up. Otherwise it is the prompt tokens per second of
// busy time vigil measured (persisted), which errs slow.

const (
	// windowMargin multiplies the longest legitimate silence.
	windowMargin = 3
	// recentPace is how far back the engine's recent prefill rate looks.
	recentPace = 10 * time.Minute
	// paceTokens is the fewest prompt tokens per prefill a stretch of the
	// engine's figures needs to tell its rate: a prefill's fixed cost (a
	// step) dominates a short prompt's, so a stretch of vigil's own
	// one-token probes alone would read a rate a hundred times too slow.
	paceTokens = 64
	// gapQuantile is the quantile of past silences the window covers.
	gapQuantile = 0.999
	// logKeep is how long the work log remembers, and logMax its size.
	logKeep = 6 * time.Hour
	logMax  = 2000
	// defaultStep is an engine step when the heartbeat gives none.
	defaultStep = time.Second
)

// workLog is what the watchdog learns of this engine's pace, kept in the
// state file so a restart of vigil does not start from nothing.
type workLog struct {
	// Gaps are the silences between counter moves while work was pending,
	// each recorded when a move ended it.
	Gaps []logged `json:"gaps,omitempty"`
	// Prefill holds, for each cycle that began with work pending, the
	// prompt tokens computed (V: counted less prefix-cache hits) and the
	// cycle's length (D): their sums give
	// prompt tokens per second of busy time. A prompt is counted only at
	// its first token, so one interval's rise says nothing of the rate it
	// prefilled at; the sum over busy time does, and on the slow side
	// (decode time is busy time too), which is the safe side here.
	Prefill []logged `json:"prefill,omitempty"`
	// Open is the busy time (and tokens) of cycles not yet ended by a
	// counter move: a silent cycle joins the entry of the move that ends
	// it (a long prefill's silence is busy time of the prompt counted at
	// its end), and a silence no move ends (a hang) is never logged, so
	// a hang does not slow the rate down and grow its own window.
	Open logged `json:"open_prefill,omitzero"`
	// Engine holds the engine's own prefill figures between readable
	// samples: prompt tokens computed (V) over the seconds its
	// prefill-time histogram summed (D). Their recent sums follow the
	// engine's pace now (an engine slowed 20x shows it in minutes).
	Engine []logged `json:"engine_prefill,omitempty"`
	// Served counts cycles in which counters moved with work pending (told
	// by diagnose; no longer a gate).
	Served int `json:"served"`
}

// logged is one measurement: a duration (a gap) or a rate, with its time.
type logged struct {
	At time.Time     `json:"at"`
	D  time.Duration `json:"d,omitempty"`
	V  float64       `json:"v,omitempty"`
	// N counts the requests of an engine figure (0: not known).
	N float64 `json:"n,omitempty"`
}

// learn takes what the last sample of h (a history as wholeScrapes reads
// it) shows: a silence it ended, the prefill rate since the readable
// sample before it, a cycle of serving.
func (l *workLog) learn(h []Sample, now time.Time) {
	if len(h) < 2 || !h[len(h)-1].readable() {
		return
	}
	last := &h[len(h)-1]
	prev := -1
	for i := len(h) - 2; i >= 0; i-- {
		if h[i].readable() {
			prev = i
			break
		}
	}
	if prev < 0 {
		return
	}
	moved, reset := compare(h[prev].Metrics.Metrics, last.Metrics.Metrics)
	if reset {
		l.Open = logged{}
		return
	}
	if a, b := computed(h[prev].Metrics.Metrics), computed(last.Metrics.Metrics); a.ok && b.ok && b.secs > a.secs && b.tokens >= a.tokens {
		l.Engine = append(l.Engine, logged{At: last.At, V: b.tokens - a.tokens, D: time.Duration((b.secs - a.secs) * float64(time.Second)),
			N: max(b.n-a.n, 0)})
	}
	l.Engine = keepWithin(l.Engine, now, recentPace)
	if p, _ := h[prev].pending(); p {
		a, ok1 := h[prev].Metrics.Metrics.Extra[probes.MetricPromptTokens]
		b, ok2 := last.Metrics.Metrics.Extra[probes.MetricPromptTokens]
		if dt := last.At.Sub(h[prev].At); ok1 && ok2 && b >= a && dt > 0 {
			v := b - a
			ha, ok3 := h[prev].Metrics.Metrics.Extra[probes.MetricPrefixCacheHits]
			hb, ok4 := last.Metrics.Metrics.Extra[probes.MetricPrefixCacheHits]
			if ok3 && ok4 && hb >= ha {
				v = max(v-(hb-ha), 0)
			}
			l.Open.V += v
			l.Open.D += dt
		}
		if moved && l.Open.D > 0 {
			l.Prefill = append(l.Prefill, logged{At: last.At, V: l.Open.V, D: l.Open.D})
			l.Open = logged{}
		}
		l.Prefill = keepRecent(l.Prefill, now)
	}
	if !moved {
		return
	}
	// The stall the classifier saw at the readable sample before this
	// move is the silence this move ended, as the window will have to
	// cover it: measured the same way, on the same clock.
	before := scanHistory(h[:prev+1], h[prev].At)
	if before.pending {
		l.Served++
		if before.stall > 0 {
			l.Gaps = append(l.Gaps, logged{At: last.At, D: before.stall})
		}
	}
	l.Gaps = keepRecent(l.Gaps, now)
}

func keepRecent(xs []logged, now time.Time) []logged { return keepWithin(xs, now, logKeep) }

func keepWithin(xs []logged, now time.Time, keep time.Duration) []logged {
	cut := 0
	for cut < len(xs) && (xs[cut].At.Before(now.Add(-keep)) || len(xs)-cut > logMax) {
		cut++
	}
	return xs[cut:]
}

// gapQ is the gapQuantile of the logged silences (0 when none).
func (l *workLog) gapQ() time.Duration {
	if len(l.Gaps) == 0 {
		return 0
	}
	ds := make([]time.Duration, len(l.Gaps))
	for i, g := range l.Gaps {
		ds[i] = g.D
	}
	slices.Sort(ds)
	return ds[min(int(gapQuantile*float64(len(ds))), len(ds)-1)]
}

// prefillRate is prompt tokens per second of busy time (0 when none).
func (l *workLog) prefillRate() float64 {
	var tokens float64
	var busy time.Duration
	for _, p := range l.Prefill {
		tokens += p.V
		busy += p.D
	}
	if tokens <= 0 || busy <= 0 {
		return 0
	}
	return tokens / busy.Seconds()
}

// prefillFigures are the engine's own cumulative prefill figures in one
// scrape: prompt tokens computed (counted less prefix-cache hits) and the
// seconds its prefill-time histogram summed.
type prefillFigures struct {
	tokens, secs float64
	n            float64 // prefills counted (0: not exported)
	ok           bool
}

func computed(m *probes.Metrics) prefillFigures {
	if m == nil {
		return prefillFigures{}
	}
	tokens, ok1 := m.Extra[probes.MetricPromptTokens]
	secs, ok2 := m.Extra[probes.MetricPrefillTimeSum]
	if !ok1 || !ok2 {
		return prefillFigures{}
	}
	if hits, ok := m.Extra[probes.MetricPrefixCacheHits]; ok {
		tokens -= hits
	}
	n := m.Extra[probes.MetricPrefillTimeCount]
	return prefillFigures{tokens: max(tokens, 0), secs: secs, n: n, ok: true}
}

// telling reports whether a stretch of V tokens over N prefills is long
// enough per prefill to tell a rate (N unknown: taken as it is).
func telling(tokens, n float64) bool { return n <= 0 || tokens >= paceTokens*n }

// engineRate is the engine's own prefill rate since it started; 0 when it
// does not export both figures or has prefilled nothing.
func engineRate(m *probes.Metrics) float64 {
	f := computed(m)
	if !f.ok || f.secs <= 0 || f.tokens <= 0 || !telling(f.tokens, f.n) {
		return 0
	}
	return f.tokens / f.secs
}

// engineRecent is the engine's own prefill rate over the last recentPace
// (0 with no prefill in that time).
func (l *workLog) engineRecent(now time.Time) float64 {
	rate, _ := l.engineRecentSpan(now)
	return rate
}

// engineRecentSpan is engineRecent and how far back its figures go:
// recentPace, or less when vigil has watched the engine for less (diagnose
// samples for seconds, and saying "the last 10 minutes" of those would be
// a figure that is not true).
func (l *workLog) engineRecentSpan(now time.Time) (float64, time.Duration) {
	var tokens float64
	var secs time.Duration
	span := time.Duration(0)
	for _, e := range l.Engine {
		if !e.At.Before(now.Add(-recentPace)) && telling(e.V, e.N) {
			tokens += e.V
			secs += e.D
			span = max(span, now.Sub(e.At))
		}
	}
	if tokens <= 0 || secs <= 0 {
		return 0, 0
	}
	return tokens / secs.Seconds(), span
}

// pace is the prefill rate in force and what it was learned from.
type pace struct {
	rate float64
	from string
}

// paceOf is the prefill rate in force. The engine's own figures come
// first: the slower of its rate over the last recentPace and since it
// started (the first follows a slowdown, the second needs no history).
// Without them, the prompt tokens per second of busy time vigil measured,
// which counts decode time as busy and so errs slow, many times so on a
// decode-heavy engine.
func paceOf(l *workLog, m *probes.Metrics, now time.Time) pace {
	recent, span := l.engineRecentSpan(now)
	lifetime := engineRate(m)
	switch {
	case recent > 0 && lifetime > 0:
		return pace{rate: min(recent, lifetime), from: fmt.Sprintf("the engine's prefill time, the slower of %s tok/s %s and %s tok/s since it started",
			humanize.Count(recent), recentWords(span), humanize.Count(lifetime))}
	case recent > 0 || lifetime > 0:
		return pace{rate: max(recent, lifetime), from: fmt.Sprintf("%s tok/s by the engine's prefill time", humanize.Count(max(recent, lifetime)))}
	}
	if mine := l.prefillRate(); mine > 0 {
		return pace{rate: mine, from: fmt.Sprintf("%s tok/s over %s of busy cycles seen by vigil (the engine exports no prefill time)", humanize.Count(mine), humanize.Duration(l.busy()))}
	}
	return pace{from: "no prefill rate yet (no busy cycle seen, no prefill-time figure from the engine)"}
}

// recentWords says how far back the engine's recent rate looks: the last
// recentPace, or the stretch its figures cover when that is shorter.
func recentWords(span time.Duration) string {
	return "over the last " + humanize.Duration(min(span.Round(time.Second), recentPace))
}

// busy is the busy time the prefill log covers.
func (l *workLog) busy() time.Duration {
	var d time.Duration
	for _, p := range l.Prefill {
		d += p.D
	}
	return d
}

// window is the hang_after in force, why, and what it was learned from.
type window struct {
	D    time.Duration
	Why  string
	From string
}

// autoWindow sizes the window for the last sample's work. It is pure: the
// history, what the log learned and the bounds are all it reads.
func autoWindow(history []Sample, l *workLog, lo, hi time.Duration) window {
	if len(history) == 0 {
		return window{D: hi, Why: fmt.Sprintf("hang_after %s (auto, the ceiling): no sample yet", humanize.Duration(hi))}
	}
	last := &history[len(history)-1]
	var m *probes.Metrics
	for i := len(history) - 1; i >= 0; i-- {
		if history[i].readable() {
			m = history[i].Metrics.Metrics
			break
		}
	}
	ctx := 0
	for i := len(history) - 1; i >= 0 && ctx == 0; i-- {
		ctx = history[i].Models.MaxModelLen
	}
	pc := paceOf(l, m, last.At)
	from := learnedFrom(l, pc, ctx)
	ceiling := func(why string) window {
		return window{D: hi, Why: fmt.Sprintf("hang_after %s (auto, the ceiling): %s", humanize.Duration(hi), why), From: from}
	}
	probe := 0.0
	if last.Probe.Pending() {
		probe = 1
	}
	var parts []string
	var longest time.Duration
	lim := last.Limiter
	inEngine := 0.0
	if m != nil {
		inEngine = m.Waiting + m.Running
	}
	// unsent sizes work the limiter did not send: any prompt up to the
	// model's context length.
	unsent := func(what string) (time.Duration, string, bool) {
		if ctx <= 0 || pc.rate <= 0 {
			return 0, "", false
		}
		return time.Duration(float64(ctx)/pc.rate*float64(time.Second)) + stepTime(history),
			fmt.Sprintf("%s, sized as a full-context prompt (max_model_len %s) at %s tok/s", what, humanize.Count(float64(ctx)), humanize.Count(pc.rate)), true
	}
	// Work is in flight when the engine holds more than vigil's probe, or
	// when the limiter has calls out: the probe may not be in the gauges
	// yet, and then the one running request is a call, not the probe.
	if inEngine > probe || lim != nil && lim.InFlight > 0 && inEngine > 0 {
		switch {
		case lim == nil:
			what := fmt.Sprintf("%s requests in the engine and no limiter in front to size them", humanize.Count(inEngine))
			d, part, ok := unsent(what)
			if !ok {
				return ceiling(what)
			}
			longest, parts = d, append(parts, part)
		case inEngine > float64(lim.InFlight)+probe:
			what := fmt.Sprintf("%s requests in the engine, %s of them through the limiter: work it did not admit",
				humanize.Count(inEngine), humanize.Count(float64(lim.InFlight)))
			d, part, ok := unsent(what)
			if !ok {
				return ceiling(what)
			}
			longest, parts = d, append(parts, part)
		case lim.LongestPrompt > 0:
			if pc.rate <= 0 {
				return ceiling(fmt.Sprintf("a %s-token prompt in flight and no prefill rate measured yet", humanize.Count(float64(lim.LongestPrompt))))
			}
			longest = time.Duration(float64(lim.LongestPrompt)/pc.rate*float64(time.Second)) + stepTime(history)
			parts = append(parts, fmt.Sprintf("longest prefill in flight %s tokens at %s tok/s",
				humanize.Count(float64(lim.LongestPrompt)), humanize.Count(pc.rate)))
		}
	}
	if q := l.gapQ(); q > 0 {
		parts = append(parts, fmt.Sprintf("history p99.9 gap %s", humanize.Duration(q)))
		longest = max(longest, q)
	}

	if len(parts) == 0 {
		parts = append(parts, "no silence with work pending seen, nothing long in flight")
	}
	d := min(max(windowMargin*longest, lo), hi)
	bound := ""
	switch d {
	case lo:
		bound = ", the floor"
	case hi:
		bound = ", the ceiling"
	}
	return window{D: d, Why: fmt.Sprintf("hang_after %s (auto%s): %s; x%d margin", humanize.Duration(d), bound, strings.Join(parts, ", "), windowMargin), From: from}
}

// learnedFrom says, in one line, what the window was learned from.
func learnedFrom(l *workLog, pc pace, ctx int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "prefill rate: %s", pc.from)
	if len(l.Gaps) == 0 {
		b.WriteString("; no silence with work pending logged")
	} else {
		longest := time.Duration(0)
		for _, g := range l.Gaps {
			longest = max(longest, g.D)
		}
		fmt.Fprintf(&b, "; %d silences with work pending logged, longest %s", len(l.Gaps), humanize.Duration(longest))
	}
	if ctx > 0 {
		fmt.Fprintf(&b, "; max_model_len %s", humanize.Count(float64(ctx)))
	}
	return b.String()
}

// stepTime is one engine step by the iteration heartbeat over the last
// two readable samples that moved it; without one, defaultStep, but never
// more than a quarter of a cycle (an engine step is far shorter than one).
func stepTime(history []Sample) time.Duration {
	fallback := defaultStep
	if n := len(history); n >= 2 {
		if cycle := history[n-1].At.Sub(history[n-2].At); cycle > 0 {
			fallback = min(fallback, cycle/4)
		}
	}
	var a, b *Sample
	for i := len(history) - 1; i >= 0 && a == nil; i-- {
		if !history[i].readable() {
			continue
		}
		if b == nil {
			b = &history[i]
		} else {
			a = &history[i]
		}
	}
	if a == nil {
		return fallback
	}
	const steps = "vllm:iteration_tokens_total_count"
	x, ok1 := a.Metrics.Metrics.Heartbeats[steps]
	y, ok2 := b.Metrics.Metrics.Heartbeats[steps]
	if !ok1 || !ok2 || y <= x {
		return fallback
	}
	return min(time.Duration(float64(b.At.Sub(a.At))/(y-x)), fallback)
}
