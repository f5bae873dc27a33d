package engineloss

import (
	"sync"
	"time"
)

// The stall suspicion at work: the Watch under its own lock, fed by the
// limiter's calls, checked every SuspicionTick, and told of progress the
// bytes do not show by the engine's counters, read while it is quiet or
// suspected. What the limiter does while the engine is suspected (hold
// it, send calls to a peer) is the Host's.

const (
	// SuspicionTick is how often the watch is checked.
	SuspicionTick = 100 * time.Millisecond
	// SuspicionScrape is how often the engine's counters are read while it
	// is quiet or suspected: one that advanced is progress the bytes did
	// not show (a prefill, calls that do not pass through vigil).
	SuspicionScrape = 250 * time.Millisecond
)

// Counters are the engine's progress counters: prompt tokens counted and
// first tokens produced.
type Counters struct{ PromptTokens, FirstTokens float64 }

// Host is what a Suspicion asks of the limiter.
type Host interface {
	Now() time.Time
	// Sleep waits d on the limiter's clock; false once it is closing.
	Sleep(d time.Duration) bool
	// Recovering: the verdict is in, the outage's rules hold.
	Recovering() bool
	// ReadCounters reads the engine's counters once; ok false when they
	// cannot be read.
	ReadCounters() (c Counters, ok bool)
	// Suspect holds the engine at a suspicion raised (ev: what raised
	// it); Unsuspect releases it when progress clears it.
	Suspect(now time.Time, ev Evidence)
	Unsuspect()
}

// Suspicion is the limiter's stall watch. A nil *Suspicion is off: it
// notes nothing and never suspects.
type Suspicion struct {
	mu sync.Mutex
	w  *Watch
	on bool // the engine is held for a suspicion
	// base is the engine's counters at the first read of a quiet spell.
	base     Counters
	haveBase bool
	quiet    bool // the engine is quiet (Watch.Quiet): its counters are read
	// spell numbers the quiet spells: a read that comes back in a later
	// spell than it began in says nothing of the spell it returns to.
	spell int
}

// NewSuspicion is a watch with nothing seen; floor is the shortest
// silence that raises a suspicion (0: the default, a second).
func NewSuspicion(floor time.Duration) *Suspicion {
	w := NewWatch()
	w.Floor = floor
	return &Suspicion{w: w}
}

// DiscountPauses tells the watch how much of [a, b] vigil itself was not
// running (pausemeter.Meter.Paused; Watch.Paused), before Run.
func (s *Suspicion) DiscountPauses(paused func(a, b time.Time) time.Duration) {
	s.mu.Lock()
	s.w.Paused = paused
	s.mu.Unlock()
}

// Sent notes a call c sent to the engine (Watch.Sent).
func (s *Suspicion) Sent(c any, now time.Time, prompt, output int, stream bool) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.w.Sent(c, now, prompt, output, stream)
	s.mu.Unlock()
}

// Chunk notes bytes of c's answer.
func (s *Suspicion) Chunk(c any, now time.Time) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.w.Chunk(c, now)
	s.mu.Unlock()
}

// Done notes c's end (answered: the engine's answer ended, of output
// tokens, -1 unknown).
func (s *Suspicion) Done(c any, now time.Time, answered bool, output int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.w.Done(c, now, answered, output)
	s.mu.Unlock()
}

// Last is when the engine last progressed.
func (s *Suspicion) Last() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Last()
}

// Suspected reports whether the engine is suspected stalled now.
func (s *Suspicion) Suspected() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.on
}

// Confirmed ends a suspicion at the watchdog's verdict; it reports whether
// one was on (the engine the limiter held for it is the recovery's now).
func (s *Suspicion) Confirmed(now time.Time) (was bool) {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.Confirmed(now)
	was, s.on = s.on, false
	return was
}

// Run checks the watch every SuspicionTick until h.Sleep says the limiter
// is closing, and reads the engine's counters while it is quiet or
// suspected.
func (s *Suspicion) Run(h Host) {
	var scraped time.Time
	// The counters are read beside the checks, one read at a time: a
	// frozen engine answers its /metrics no more than its calls, and a
	// read that waits its timeout (seconds) in this loop held the check
	// of every call for as long (a stall suspected 3.9 s after the last
	// progress instead of 2.0 s; bench/README.md, the false suspicion on
	// the real llama-server).
	reading := make(chan struct{}, 1)
	var reads sync.WaitGroup
	defer reads.Wait() // Run's return is the last use of h
	for {
		if !h.Sleep(SuspicionTick) {
			return
		}
		if h.Recovering() {
			continue // the verdict is in: the outage's rules hold
		}
		now := h.Now()
		s.mu.Lock()
		suspected, was := s.w.Check(now), s.on
		s.on = suspected
		ev := s.w.Evidence()
		quiet := s.w.Quiet(now)
		if quiet && !s.quiet {
			s.haveBase = false // a new quiet spell: its first read is the base
			s.spell++
		}
		s.quiet = quiet
		spell := s.spell
		s.mu.Unlock()
		switch {
		case suspected && !was:
			h.Suspect(now, ev)
		case !suspected && was:
			h.Unsuspect()
		}
		if quiet && now.Sub(scraped) >= SuspicionScrape {
			select {
			case reading <- struct{}{}:
				scraped = now
				reads.Add(1)
				go func() {
					defer reads.Done()
					defer func() { <-reading }()
					if g, ok := h.ReadCounters(); ok {
						s.progress(spell, g, h.Now())
					}
				}()
			default: // the last read is not back yet
			}
		}
	}
}

// progress takes one read of the engine's counters: any that advanced
// since the quiet spell's first read is progress (the next tick finds the
// suspicion gone and releases the engine).
func (s *Suspicion) progress(spell int, g Counters, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if spell != s.spell || !s.quiet {
		return // begun in a spell that has ended
	}
	if !s.haveBase {
		s.base, s.haveBase = g, true
		return
	}
	if g.PromptTokens > s.base.PromptTokens || g.FirstTokens > s.base.FirstTokens {
		s.w.Progress(now)
	}
}
