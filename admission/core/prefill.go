package core

import (
	"math"
	"time"
)

// EngineLoad is one reading of the engine's /metrics: its queue gauges and
// the series that tell an engine busy prefilling long prompts from one
// that cannot take more. A series the scrape lacked is -1.
type EngineLoad struct {
	// Waiting and Running are the engine's queue gauges (summed over its
	// data-parallel ranks).
	Waiting, Running float64
	// KVUsage is the KV cache's used share (0..1).
	KVUsage float64
	// PromptTokens and FirstTokens are counters: prompt tokens counted and
	// prefills completed (first tokens) since the engine started.
	// CachedTokens counts the prompt tokens found in the prefix cache
	// (the profile's prefix-cache hits), which the engine does not prefill; -1 (or
	// 0) when unknown, and every prompt token then counts as prefilled.
	PromptTokens, FirstTokens, CachedTokens float64
}

// QueueOnly is a reading of the queue gauges alone.
func QueueOnly(waiting, running float64) EngineLoad {
	return EngineLoad{Waiting: waiting, Running: running, KVUsage: -1, PromptTokens: -1, FirstTokens: -1, CachedTokens: -1}
}

const (
	// longPrompt: prompts (mean prompt tokens per prefill completed lately)
	// at least this long need a whole engine step of prefill or more each,
	// whatever the engine's per-step token budget: 8192 is vLLM's largest
	// default max_num_batched_tokens for online serving (2048 on smaller
	// GPUs). Such prompts wait in the engine's queue for the step's token
	// budget, one admitted a step, while the engine still has seats and KV
	// cache for them: that queue is the engine at full prefill, not a cap
	// above what it can run. Shorter prompts are admitted several a step,
	// and there the queue rule stands as it was: at 2048 chat-sized
	// prompts (2,000 +- 1,000 tokens) read as long half of the time and
	// the cap ran to its ceiling.
	longPrompt = 8192
	// prefillMemory and prefillKeep: prefill progress and the mean prompt
	// length are averaged (decaying) over about prefillMemory or the last
	// prefillKeep prefills, whichever is longer: several long prefills, as
	// a window of two gauge readings sees zero or one of them. Over 5 s
	// alone an engine ten times slower than the default (a 12,000-token
	// prompt in 4 s) averaged one or two prefills, and the mean prompt
	// swung by a prompt's prefix from reading to reading (see note); in
	// prefills, the mean holds on any engine.
	prefillMemory = 5 * time.Second
	prefillKeep   = 8
	// kvFull and seatsFull: the engine cannot take more when its KV cache
	// is this full, or its running batch this close to max_num_seqs
	// (engine_max_seqs, or vLLM's default 256 when not configured): its
	// queue is then a real queue whatever the prompts' length.
	kvFull    = 0.9
	seatsFull = 0.95
)

// prefillMeter follows the engine's prompt-token and first-token counters
// (their growth between readings, decaying over prefillMemory) to tell a
// prefill backlog of long prompts from a full engine. Both limits use it:
// the automatic cap to grow through such a backlog, the fixed cap to keep
// its full size under a saturated verdict that only counted it.
type prefillMeter struct {
	// seats is the engine's max_num_seqs when configured (0: vLLM's
	// default, autoMax).
	seats int
	// dPrompt is the prompt tokens counted, dCached those the prefix
	// cache held, dFirst the prefills completed.
	dPrompt, dCached, dFirst float64
	dSpan                    time.Duration
	// The last reading (-1: none).
	prevPrompt, prevFirst, prevCached float64
	prevAt                            time.Time
	readings                          int
}

func newPrefillMeter(seats int) prefillMeter {
	return prefillMeter{seats: seats, prevPrompt: -1, prevFirst: -1, prevCached: -1}
}

// note keeps the decaying growth of the counters. A counter that went
// down (the engine restarted) or went missing starts again from this
// reading.
func (m *prefillMeter) note(g EngineLoad, now time.Time) {
	if g.PromptTokens >= 0 && g.FirstTokens >= 0 && m.prevPrompt >= 0 && m.prevFirst >= 0 &&
		g.PromptTokens >= m.prevPrompt && g.FirstTokens >= m.prevFirst {
		dt := now.Sub(m.prevAt)
		first := g.FirstTokens - m.prevFirst
		keep := math.Exp(-min(dt.Seconds()/prefillMemory.Seconds(), first/prefillKeep))
		cached := 0.0
		if g.CachedTokens >= m.prevCached && m.prevCached >= 0 {
			// A prompt's cached prefix is no prefill: counted, prompts
			// behind a long shared prefix are judged long and go through
			// the first-token limit a few at a time, far under what the
			// engine runs well. Figures: bench/README.md, "Figures once
			// kept in code comments", a cached prefix is no prefill.
			cached = g.CachedTokens - m.prevCached
		}
		// Summed apart and subtracted in the mean, not reading by
		// reading: vLLM counts a prompt's cached tokens when it is
		// scheduled and its prompt tokens at its first token, a prefill
		// later, and a reading that saw only the former cannot take them
		// from the latter (clipped at zero, a slow engine's prompts read
		// whole, their prefix with them, as often as not).
		m.dPrompt = m.dPrompt*keep + g.PromptTokens - m.prevPrompt
		m.dCached = m.dCached*keep + cached
		m.dFirst = m.dFirst*keep + first
		m.dSpan = time.Duration(float64(m.dSpan)*keep) + dt
	}
	m.prevPrompt, m.prevFirst, m.prevCached, m.prevAt = g.PromptTokens, g.FirstTokens, g.CachedTokens, now
	m.readings++
}

// prefilled is the mean prompt tokens prefilled lately a prompt, its
// cached prefix aside; 0 while the counters have not told.
func (m *prefillMeter) prefilled() float64 {
	if m.dFirst <= 0 {
		return 0
	}
	return max(0, m.dPrompt-m.dCached) / m.dFirst
}

// long reports whether the prompts prefilled lately are long (longPrompt
// tokens or more prefilled on average, their cached prefix aside): each
// needs a step's token budget of its own, so two never share a step.
func (m *prefillMeter) long() bool {
	return m.dFirst > 0 && m.prefilled() >= longPrompt
}

// measuredShort reports whether the engine's counters say the prompts
// prefilled lately are short (not merely that their length is unknown).
func (m *prefillMeter) measuredShort() bool {
	return m.dFirst > 0 && m.prefilled() < longPrompt
}

// short reports whether the prompts are known to be short: prefilled
// lately under longPrompt tokens on average, or the engine's readings lack
// the prompt-token and first-token counters, so their length cannot be
// known (the first-token limit then judges as it did before it could
// tell). Until two readings have come it is not known either way.
func (m *prefillMeter) short() bool {
	if m.dFirst > 0 {
		return m.measuredShort()
	}
	return m.readings >= 2 && (m.prevPrompt < 0 || m.prevFirst < 0)
}

// backlog is how many of the engine's waiting requests (w; r running) are
// long prompts waiting their turn for the step's token budget on an engine
// that has room for them (0: none). With long prompts (longPrompt) vLLM
// admits one or two a step, so its waiting gauge is never empty under load
// although every one of them will run; reading that as a full engine held
// the cap at a few requests while the engine could run a hundred. The
// engine has room when its KV cache (kv, its used share; < 0: unknown) is
// below kvFull and its batch below seatsFull of its seats; the backlog is
// being worked when prefills completed lately (the prompt-token counter
// rose), and it counts up to the seats still free: each of those prompts
// gets a seat once its turn at the token budget comes. Past them the queue
// is a real one.
func (m *prefillMeter) backlog(w, r, kv float64) float64 {
	if w <= 0 || m.dSpan <= 0 || !m.long() {
		return 0
	}
	if kv >= kvFull {
		return 0
	}
	seats := m.seats
	if seats <= 0 {
		seats = autoMax
	}
	if r >= seatsFull*float64(seats) {
		return 0
	}
	return float64(seats) - r
}

// isBacklog reports whether the whole of one reading's queue is such a
// backlog.
func (m *prefillMeter) isBacklog(g EngineLoad) bool {
	b := m.backlog(g.Waiting, g.Running, g.KVUsage)
	return b > 0 && g.Waiting <= b
}
