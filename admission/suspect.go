package admission

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/admission/core"
	"github.com/vigil-dev/vigil/admission/engineloss"
)

// The stall suspicion at work (engineloss.Watch decides it): what the limiter
// feeds the watch, and what it does while the engine is suspected.
// Nothing new goes to the engine: new calls and the queued ones go to a
// pool peer that takes them, else wait in the queue, where nobody is
// refused for the engine's silence (package core, holding). Progress
// clears it at once. The watchdog's verdict turns it into the outage
// (outage.go). A suspicion restarts nothing.

const (
	// stallTick is how often the watch is checked.
	stallTick = 100 * time.Millisecond
	// stallScrape is how often the engine's counters are read while it is
	// quiet or suspected: one that advanced is progress the bytes did not
	// show (a prefill, calls that do not pass through vigil).
	stallScrape = 250 * time.Millisecond
)

// stallMon is the limiter's stall watch, under its own lock.
type stallMon struct {
	mu sync.Mutex
	w  *engineloss.Watch
	on bool // the core holds the engine for a suspicion
	// base is the engine's counters at the first read of a quiet spell.
	base     core.EngineLoad
	haveBase bool
	quiet    bool // the engine is quiet (engineloss.Watch.Quiet): its counters are read
}

// WithSuspicionHook is told when a suspicion is raised (true) and when
// progress clears it (false), e.g. to take new traffic off this node at
// the load balancer softly meanwhile (a lower weight: reversible, no
// guard, never a restart). It is not told at the verdict: the recovery
// drains and restores the node itself. It must not block.
func WithSuspicionHook(f func(on bool)) Option { return func(l *Limiter) { l.onSuspect = f } }

// stallSent notes a call sent to the engine (tk: its slot).
func (l *Limiter) stallSent(c *upstreamCall, tk *core.Listener) {
	if tk == nil || !l.cfg.SuspectStalls {
		return
	}
	now := l.clock.Now()
	l.sm.mu.Lock()
	l.sm.w.Sent(c, now, tk.Prompt(), tk.Output(), tk.Stream())
	l.sm.mu.Unlock()
}

// stallChunk notes bytes of c's answer.
func (l *Limiter) stallChunk(c *upstreamCall, now time.Time) {
	if !l.cfg.SuspectStalls {
		return
	}
	l.sm.mu.Lock()
	l.sm.w.Chunk(c, now)
	l.sm.mu.Unlock()
}

// stallDone notes c's end (answered: the engine's answer ended, of output
// tokens, -1 unknown).
func (l *Limiter) stallDone(c *upstreamCall, answered bool, output int) {
	if !l.cfg.SuspectStalls {
		return
	}
	now := l.clock.Now()
	l.sm.mu.Lock()
	l.sm.w.Done(c, now, answered, output)
	l.sm.mu.Unlock()
}

// lastProgress is when the engine last progressed (core.WithProgress).
func (l *Limiter) lastProgress() time.Time {
	l.sm.mu.Lock()
	defer l.sm.mu.Unlock()
	return l.sm.w.Last()
}

// Suspected reports whether the engine is suspected stalled now.
func (l *Limiter) Suspected() bool {
	l.sm.mu.Lock()
	defer l.sm.mu.Unlock()
	return l.sm.on
}

// watchStalls checks the watch every stallTick until Close, and reads the
// engine's counters while it is quiet or suspected.
func (l *Limiter) watchStalls() {
	defer close(l.stallLoopDone)
	tick := make(chan struct{}, 1)
	var scraped time.Time
	for {
		if !l.sleepOn(stallTick, tick) {
			return
		}
		if l.out.Active() {
			continue // the verdict is in: the outage's rules hold
		}
		now := l.clock.Now()
		l.sm.mu.Lock()
		suspected, was := l.sm.w.Check(now), l.sm.on
		l.sm.on = suspected
		quiet := l.sm.w.Quiet(now)
		if quiet && !l.sm.quiet {
			l.sm.haveBase = false // a new quiet spell: its first read is the base
		}
		l.sm.quiet = quiet
		l.sm.mu.Unlock()
		switch {
		case suspected && !was:
			l.suspect(now)
		case !suspected && was:
			l.unsuspect()
		}
		if quiet && l.reader != nil && now.Sub(scraped) >= stallScrape {
			scraped = now
			l.readProgress()
		}
	}
}

// readProgress reads the engine's counters once: any that advanced since
// the quiet spell's first read is progress.
func (l *Limiter) readProgress() {
	ctx, cancel := context.WithTimeout(l.base, pollTimeout)
	g, err := l.readEngineQueue(ctx)
	cancel()
	if err != nil {
		return
	}
	l.sm.mu.Lock()
	defer l.sm.mu.Unlock()
	if !l.sm.haveBase {
		l.sm.base, l.sm.haveBase = g, true
		return
	}
	b := l.sm.base
	if g.PromptTokens > b.PromptTokens || g.FirstTokens > b.FirstTokens {
		l.sm.w.Progress(l.clock.Now())
		// The next tick finds the suspicion gone and releases the engine.
	}
}

// suspect holds the engine: nothing new goes to it, the queue goes to a
// peer when one is known.
func (l *Limiter) suspect(now time.Time) {
	l.c.suspicions.Add(1)
	l.out.Open(now)
	peer := l.peerFor(nil) != nil
	l.core.SetSuspected(true, peer)
	n, _ := l.inflight.snapshot()
	if peer {
		l.log.WithField("in_flight", n).Warn("admission: the engine is suspected stalled (no progress for several " +
			"of its step times with calls in flight): new calls go to a peer until it progresses")
		l.core.Divert()
	} else {
		l.log.WithField("in_flight", n).Warn("admission: the engine is suspected stalled (no progress for several " +
			"of its step times with calls in flight); no peer to send calls to: none is refused for it meanwhile")
	}
	if l.onSuspect != nil {
		l.onSuspect(true)
	}
}

// unsuspect releases the engine: it progressed, the suspicion was false.
func (l *Limiter) unsuspect() {
	l.c.falseSuspicions.Add(1)
	l.out.CloseFalse()
	l.core.SetSuspected(false, false)
	l.log.Info("admission: the engine progresses again; the suspicion was false")
	if l.onSuspect != nil {
		l.onSuspect(false)
	}
}

// confirmStall turns a suspicion into the outage at the watchdog's
// verdict (SetRecovering).
func (l *Limiter) confirmStall(now time.Time) {
	l.sm.mu.Lock()
	l.sm.w.Confirmed(now)
	was := l.sm.on
	l.sm.on = false
	l.sm.mu.Unlock()
	if was {
		l.core.SetSuspected(false, false) // the recovery holds the engine now
	}
}

// holdsEngine: nothing new goes to the engine (suspected or recovered).
func (l *Limiter) holdsEngine() bool { return l.Suspected() || l.out.Active() }

// peerFor is the pool peer a call may go to (nil: none), r its request
// (nil: any call); a call moved in from another vigil moves no further.
func (l *Limiter) peerFor(r *http.Request) *Peer {
	if l.peers == nil || (r != nil && r.Header.Get(movedFromHeader) != "") {
		return nil
	}
	if ps := l.peers(); len(ps) > 0 {
		return &ps[0]
	}
	return nil
}

// toPeer sends a call the held engine cannot take to a pool peer's
// limiter, each in turn until one takes it, and streams its answer back.
// It reports whether the client was answered (or left); false when there
// is no peer or none took it, and the call waits here instead.
func (a *attempt) toPeer(body []byte) bool {
	l := a.l
	if l.peerFor(a.r) == nil {
		return false
	}
	for _, p := range l.peers() {
		if done, taken := a.sendToPeer(&p, body); done || taken {
			return true
		}
	}
	return false
}

// sendToPeer offers the call to p: taken when p answers it (streamed to
// the client), done when the client left meanwhile.
func (a *attempt) sendToPeer(p *Peer, body []byte) (done, taken bool) {
	l := a.l
	rl := l.newRelay(a.r, body)
	resp, err := l.transport.RoundTrip(l.relayRequest(a.r.Context(), rl, dest{peer: p}, body))
	if err != nil {
		if a.r.Context().Err() != nil {
			return true, false // the client left; nobody to answer
		}
		l.log.WithError(err).WithField("peer", p.Node).Debug("admission: peer could not take a call from a held engine")
		return false, false
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		return false, false
	}
	l.c.moved.Add(1)
	l.c.diverted.Add(1)
	l.out.Note(func(f *Fate) { f.MovedTo[p.Node]++ })
	l.log.WithFields(logrus.Fields{"peer": p.Node}).Debug("admission: a call for a held engine went to a peer")
	copyResponseHeader(a.w.Header(), resp.Header)
	a.w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(a.w)
	stream := streaming(resp.Header)
	if stream {
		_ = rc.Flush()
	}
	m := meter{sent: l.clock.Now()}
	sinkErr, readErr := l.pump(resp, &m, nil, func(b []byte) error {
		if _, err := a.w.Write(b); err != nil {
			return err
		}
		if stream {
			_ = rc.Flush()
		}
		return nil
	})
	if sinkErr == nil && readErr != nil && a.r.Context().Err() == nil {
		panic(http.ErrAbortHandler) // a broken answer must look broken
	}
	return false, true
}
