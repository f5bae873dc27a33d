package engineloss

import (
	"cmp"
	"slices"
	"time"
)

// A stall suspected in seconds (docs/design.md, "The hang window"). The
// watchdog proves a hang from the engine's counters frozen over
// hang_after, tens of seconds to minutes; the limiter sees every byte the
// engine sends and can know much sooner that nothing moves. The suspicion
// is cheap because what it does is reversible: nothing new goes to the
// engine while it holds (calls go to a peer or wait in vigil's queue), and
// it clears the moment a byte comes. It never restarts anything.

const (
	// stallSteps of the engine's own step time without any progress, with
	// a call overdue, raise the suspicion.
	stallSteps = 10
	// stallFloor is the shortest silence that raises it, whatever the step
	// time: a healthy engine pauses for a few hundred milliseconds now and
	// then (a scheduler hiccup, a garbage collection, a CUDA graph).
	stallFloor = time.Second
	// defaultStep is the step time assumed before one is learned;
	// defaultDecodeStep the one a plain answer's decode is given then,
	// slow for any engine, so an engine first seen serving plain answers
	// slowly is not suspected before its first answer teaches its pace.
	defaultStep       = 50 * time.Millisecond
	defaultDecodeStep = 500 * time.Millisecond
	// defaultPrefillRate (prompt tokens a second) is assumed before one is
	// learned: slow for any GPU, so a long prefill is given its time.
	defaultPrefillRate = 1000.0
	// stepWeight and prefillWeight weigh each new sample of the learned
	// step time and prefill rate (exponential averages over about 20).
	stepWeight, prefillWeight = 0.05, 0.05
	// plainSlack multiplies a plain answer's expected decode: the step it
	// is judged by is an average over answers the engine's other prefills
	// interrupt at random, and nothing of it shows before its end.
	plainSlack = 2
	// stepSlack steps after a stream's last byte, a call sent is taken for
	// one the engine had before its step began (what the limiter sees of
	// both comes a little late).
	stepSlack = 2
	// maxBackoff bounds how far false suspicions lengthen the silence
	// needed (the hysteresis); backoffDecay of quiet halves it again.
	maxBackoff   = 8
	backoffDecay = time.Minute
)

// Watch decides, from what the limiter observes of the calls it sent
// to the engine, whether the engine has stopped making progress. It is a
// pure type: every method takes the time, none reads a clock, and the
// limiter calls it under its own lock (stallMon).
//
// Progress is anything the engine did: a byte of any answer, an answer
// done, an engine counter that advanced. The engine is suspected stalled
// when, with calls in flight, nothing progressed for max(stallSteps step
// times, stallFloor) (times the backoff) and at least one call is overdue:
// a stream under way that sent nothing for that long plus the prefill of
// the prompts sent before its last byte that have no first byte yet (the
// engine's step that prefills them is long, and every stream beside it
// waits for it: on a slow model, tens of its decode steps), or a call
// whose first byte is later than the prefill of its prompt and of those
// that share the engine's steps with it (at the learned prefill rate,
// from the last first byte: the engine prefills first come, first served)
// and, for a plain answer, twice its decode (its max tokens at the learned
// step) allow. A lone long prefill or a long plain answer is not overdue;
// a saturated engine keeps progressing; a slow one has a long step. An
// engine that has answered nothing yet is not judged: its pace is unknown.
type Watch struct {
	// Floor is the shortest silence that raises a suspicion (0:
	// stallFloor).
	Floor time.Duration
	// Paused, when set, is how much of [a, b] vigil itself was not
	// running (pausemeter.Meter.Paused). A silence is judged less the
	// time vigil paused in it: what the engine sent meanwhile is read
	// only when vigil runs again, and a starved host must not blame the
	// engine for its own pauses.
	Paused func(a, b time.Time) time.Duration
	step   time.Duration // learned time between a stream's chunks
	// streamTaught: streams taught the step; plain answers (whose time
	// includes the engine's queue) no longer do.
	streamTaught bool
	prefillRate  float64 // learned prompt tokens a second
	// answered: the engine has sent a byte of a call the watch saw; its
	// silence is judged only from then (its pace is unknown before).
	answered bool
	// firstAt: when a call last had its first byte, the engine done with
	// a prompt and on to the next.
	firstAt time.Time
	last    time.Time // the last progress
	calls   map[any]*watched

	suspected bool
	since     time.Time // when the suspicion was raised
	backoff   int       // silence multiplier after false suspicions (1..maxBackoff)
	calm      time.Time // when the backoff last changed
	// raised counts suspicions; falseAlarms those progress cleared
	// before a verdict.
	raised, falseAlarms int
	evidence            Evidence // what raised the last suspicion
}

// Evidence is what the watch saw when it raised a suspicion: for the log
// line an operator reads, and for the tests that pin why.
type Evidence struct {
	Silence   time.Duration // since the engine's last progress
	Paused    time.Duration // of it, vigil's own pauses (not counted)
	Threshold time.Duration // the silence that raises a suspicion then
	Step      time.Duration // the learned step time (0: none yet)
	InFlight  int           // calls in flight
	// The overdue call: a stream under way (Started) silent for Waited,
	// or a call Waited since it was sent with no byte yet, of Prompt
	// tokens behind Ahead more still to prefill, asking for Output.
	Stream, Started       bool
	Waited                time.Duration
	Prompt, Ahead, Output int
}

// watched is one call in flight as the stall watch sees it.
type watched struct {
	sent, lastByte time.Time
	prompt, output int // estimated prompt tokens; output tokens it may ask for
	stream         bool
}

func NewWatch() *Watch {
	return &Watch{calls: map[any]*watched{}, backoff: 1}
}

// Sent notes a call sent to the engine.
func (s *Watch) Sent(c any, now time.Time, prompt, output int, stream bool) {
	if len(s.calls) == 0 {
		// Work arrives at an idle engine: its silence before is no stall.
		s.last = now
	}
	s.calls[c] = &watched{sent: now, prompt: prompt, output: output, stream: stream}
}

// Chunk notes bytes of c's answer: progress. A stream's gaps teach the
// step time, its first byte the prefill rate.
func (s *Watch) Chunk(c any, now time.Time) {
	w := s.calls[c]
	if w == nil {
		return // not a call it watches (e.g. a passed-through GET)
	}
	th := s.threshold()
	s.Progress(now)
	s.answered = true
	switch {
	case !w.stream:
	case w.lastByte.IsZero():
		s.firstAt = now
		if d := now.Sub(w.sent).Seconds(); d > 0 && w.prompt > 0 {
			s.prefillRate = ewma(s.prefillRate, float64(w.prompt)/d, prefillWeight)
		}
	default:
		// A gap longer than the silence that raises a suspicion is a
		// stall (or a pause), not a step: it does not teach.
		if gap := now.Sub(w.lastByte); gap > 0 && gap < th {
			if !s.streamTaught {
				s.step, s.streamTaught = 0, true
			}
			s.step = time.Duration(ewma(float64(s.step), float64(gap), stepWeight))
		}
	}
	w.lastByte = now
}

// Done notes c's end: progress when it ended with the engine's answer
// (answered, of output tokens; -1: unknown), not when it was cut or its
// client left. A plain answer's length teaches the step time when no
// stream does.
func (s *Watch) Done(c any, now time.Time, answered bool, output int) {
	w := s.calls[c]
	if w == nil {
		return // not a call it watches (e.g. a passed-through GET /health)
	}
	delete(s.calls, c)
	if !answered {
		return
	}
	s.Progress(now)
	s.answered = true
	if !w.stream && output > 0 && !s.streamTaught {
		d := now.Sub(w.sent) - s.prefill(w.prompt)
		if d > 0 {
			s.step = time.Duration(ewma(float64(s.step), float64(d)/float64(output), stepWeight))
		}
	}
}

// Progress notes that the engine did something at now (a byte, an
// answer, a counter that advanced). A suspicion it clears was false.
func (s *Watch) Progress(now time.Time) {
	if now.After(s.last) {
		s.last = now
	}
	if s.suspected {
		s.suspected = false
		s.falseAlarms++
		s.backoff = min(maxBackoff, 2*s.backoff)
		s.calm = now
	}
}

// Confirmed notes the watchdog's verdict: the suspicion was true, and it
// ends with the outage (the outage's own rules take over).
func (s *Watch) Confirmed(now time.Time) {
	s.suspected = false
	s.last = now
	s.calls = map[any]*watched{}
	// The engine is restarted: its first prefill (a cold cache, its CUDA
	// graphs captured) is no pace to judge by until it answers.
	s.answered = false
}

// Check reports whether the engine is suspected stalled at now.
func (s *Watch) Check(now time.Time) bool {
	if s.backoff > 1 && now.Sub(s.calm) >= backoffDecay {
		s.backoff /= 2
		s.calm = now
	}
	if s.suspected || len(s.calls) == 0 || !s.answered {
		return s.suspected
	}
	th := s.threshold()
	if s.silence(s.last, now) < th {
		return false
	}
	ahead := s.prefillQueue()
	for _, w := range s.calls {
		if due, from := s.due(w, th, ahead); now.Sub(due) > s.paused(from, now) {
			s.suspected, s.since = true, now
			s.raised++
			s.evidence = Evidence{Silence: now.Sub(s.last), Paused: s.paused(s.last, now), Threshold: th,
				Step: s.step, InFlight: len(s.calls), Stream: w.stream, Started: !w.lastByte.IsZero(),
				Prompt: w.prompt, Output: w.output}
			if w.lastByte.IsZero() {
				s.evidence.Waited = now.Sub(w.sent)
				s.evidence.Ahead = ahead.upTo(w.sent) - w.prompt
			} else {
				s.evidence.Waited = now.Sub(w.lastByte)
				s.evidence.Ahead = s.pendingAt(w, ahead)
			}
			return true
		}
	}
	return false
}

// Evidence is what raised the last suspicion.
func (s *Watch) Evidence() Evidence { return s.evidence }

// Last is when the engine last progressed.
func (s *Watch) Last() time.Time { return s.last }

// Quiet: calls are in flight and nothing progressed for the silence that
// raises a suspicion, whether or not one is overdue yet (a long prefill
// may excuse it). The limiter reads the engine's counters meanwhile: one
// that advanced is progress no byte showed.
func (s *Watch) Quiet(now time.Time) bool {
	return s.suspected || (len(s.calls) > 0 && s.silence(s.last, now) >= s.threshold())
}

// paused is how much of [a, b] vigil was not running (Paused).
func (s *Watch) paused(a, b time.Time) time.Duration {
	if s.Paused == nil {
		return 0
	}
	return s.Paused(a, b)
}

// silence is the engine's time from a to b less vigil's own pauses.
func (s *Watch) silence(a, b time.Time) time.Duration { return b.Sub(a) - s.paused(a, b) }

// threshold is the silence that raises a suspicion.
func (s *Watch) threshold() time.Duration {
	return time.Duration(s.backoff) * max(stallSteps*s.stepTime(), cmp.Or(s.Floor, stallFloor))
}

// due is when w is overdue if nothing came, counted from `from` (vigil's
// pauses since are added to it): th after its last byte and the prefill
// pending then (pendingAt), or after its prefill and (a plain answer) its
// decode would have sent its first. Its prefill is the
// engine's, first come first served: its own prompt and those of the
// calls sent before it that have not had a first byte either (ahead), so
// a short call behind a long prompt waits for that prompt's prefill too.
func (s *Watch) due(w *watched, th time.Duration, ahead prefillQueue) (due, from time.Time) {
	if !w.lastByte.IsZero() {
		return w.lastByte.Add(th + s.prefill(s.pendingAt(w, ahead))), w.lastByte
	}
	// The engine prefills first come, first served: it came to the
	// calls still waiting for a first byte no earlier than the last first
	// byte (the prompt before theirs done).
	from = w.sent
	if s.firstAt.After(from) {
		from = s.firstAt
	}
	// Its prefill, and (chunked prefill) those of the calls sent while it
	// prefills, which share its steps.
	d := s.prefill(ahead.upTo(w.sent))
	d = s.prefill(ahead.upTo(from.Add(d)))
	if !w.stream {
		step := s.step
		if step <= 0 {
			step = defaultDecodeStep
		}
		d += plainSlack * time.Duration(w.output) * step
	}
	return from.Add(d + th), from
}

// pendingAt is the prompt tokens a stream under way waits for after its
// last byte: those of the calls sent before it (give or take
// stepSlack steps, where the engine's step began) with no first byte
// yet. The engine's next step prefills them, and a step that prefills is
// long: the stream's next token comes after it.
func (s *Watch) pendingAt(w *watched, ahead prefillQueue) int {
	return ahead.upTo(w.lastByte.Add(stepSlack * s.stepTime()))
}

// prefillQueue is the prompts of the calls in flight that have had no
// byte yet, in the order they were sent: what the engine has still to
// prefill, as far as the watch can tell.
type prefillQueue struct {
	sent   []time.Time
	prompt []int // prompt[i]: the tokens of the calls sent up to sent[i]
}

// prefillQueue is the calls' prefill queue now.
func (s *Watch) prefillQueue() prefillQueue {
	var ws []*watched
	for _, w := range s.calls {
		if w.lastByte.IsZero() {
			ws = append(ws, w)
		}
	}
	slices.SortFunc(ws, func(a, b *watched) int { return a.sent.Compare(b.sent) })
	q := prefillQueue{sent: make([]time.Time, len(ws)), prompt: make([]int, len(ws))}
	sum := 0
	for i, w := range ws {
		sum += w.prompt
		q.sent[i], q.prompt[i] = w.sent, sum
	}
	return q
}

// upTo is the prompt tokens of the calls sent up to t.
func (q prefillQueue) upTo(t time.Time) int {
	i, _ := slices.BinarySearchFunc(q.sent, t, func(a, t time.Time) int {
		if a.After(t) {
			return 1
		}
		return -1
	})
	if i == 0 {
		return 0
	}
	return q.prompt[i-1]
}

// prefill is the time prompt tokens take at the learned prefill rate.
func (s *Watch) prefill(prompt int) time.Duration {
	rate := s.prefillRate
	if rate <= 0 {
		rate = defaultPrefillRate
	}
	return time.Duration(float64(prompt) / rate * float64(time.Second))
}

func (s *Watch) stepTime() time.Duration {
	if s.step <= 0 {
		return defaultStep
	}
	return s.step
}

// ewma folds x into avg with weight w (avg 0: none yet, x is taken).
func ewma(avg, x, w float64) float64 {
	if avg <= 0 {
		return x
	}
	return avg + w*(x-avg)
}
