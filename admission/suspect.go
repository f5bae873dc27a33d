package admission

import (
	"net/http"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/admission/core"
	"github.com/vigil-dev/vigil/admission/engineloss"
	"github.com/vigil-dev/vigil/admission/inflight"
	"github.com/vigil-dev/vigil/admission/usage"
	"github.com/vigil-dev/vigil/util/humanize"
)

// The stall suspicion at work (engineloss.Suspicion watches for it): what
// the limiter does while the engine is suspected. Nothing new goes to the
// engine: new calls and the queued ones go to a pool peer that takes
// them, else wait in the queue, where nobody is refused for the engine's
// silence (package core, holding). Progress clears it at once. The
// watchdog's verdict turns it into the outage (outage.go). A suspicion
// restarts nothing.

// WithSuspicionHook is told when a suspicion is raised (true) and when
// progress clears it (false), e.g. to take new traffic off this node at
// the load balancer softly meanwhile (a lower weight: reversible, no
// guard, never a restart). It is not told at the verdict: the recovery
// drains and restores the node itself. It must not block.
func WithSuspicionHook(f func(on bool)) Option { return func(l *Limiter) { l.onSuspect = f } }

// WithStallFloor sets the shortest silence of the engine that raises a
// suspicion (default a second; longer when the engine's step times are).
// For a benchmark that runs the limiter on a time-scaled engine's clock:
// its own pauses (a loaded machine's timers, tens of milliseconds of wall
// time) are that many times longer in engine time, silences no engine
// made.
func WithStallFloor(d time.Duration) Option { return func(l *Limiter) { l.stallFloor = d } }

// Suspected reports whether the engine is suspected stalled now.
func (l *Limiter) Suspected() bool { return l.sus.Suspected() }

// stallSent notes a call sent to the engine (tk: its slot) to the watch,
// and when it went.
func (l *Limiter) stallSent(c *inflight.Call, tk *core.Listener) {
	if tk == nil {
		return
	}
	now := l.clock.Now()
	l.lastSent.Store(now.UnixNano())
	if l.sus != nil {
		l.sus.Sent(c, now, tk.Prompt(), tk.Output(), tk.Stream())
	}
}

// engineCallDone ends a call sent to the engine: it leaves the calls in
// flight (counted as answered when the engine's answer came to its end)
// and the stall watch.
func (l *Limiter) engineCallDone(c *inflight.Call, answered bool, output int) {
	l.inflight.Done(c, answered)
	l.sus.Done(c, l.clock.Now(), answered, output)
}

// suspicionHost is the limiter as its engineloss.Suspicion sees it.
type suspicionHost struct {
	l    *Limiter
	tick chan struct{}
}

func (h suspicionHost) Now() time.Time                                { return h.l.clock.Now() }
func (h suspicionHost) Sleep(d time.Duration) bool                    { return h.l.sleepOn(d, h.tick) }
func (h suspicionHost) Recovering() bool                              { return h.l.out.Active() }
func (h suspicionHost) Suspect(now time.Time, ev engineloss.Evidence) { h.l.suspect(now, ev) }
func (h suspicionHost) Unsuspect()                                    { h.l.unsuspect() }

// ReadCounters reads the engine's counters once.
func (h suspicionHost) ReadCounters() (engineloss.Counters, bool) {
	if h.l.poll == nil {
		return engineloss.Counters{}, false
	}
	g, err := h.l.poll.Read(h.l.base)
	return engineloss.Counters{PromptTokens: g.PromptTokens, FirstTokens: g.FirstTokens}, err == nil
}

// suspect holds the engine: nothing new goes to it, the queue goes to a
// peer when one is known. The log tells an episode once, with what
// raised its first suspicion (engineloss.Episodes); /metrics counts each.
func (l *Limiter) suspect(now time.Time, ev engineloss.Evidence) {
	l.c.suspicions.Add(1)
	l.out.Open(now)
	peer := l.peerFor(nil) != nil
	l.core.SetSuspected(true, peer)
	if peer {
		l.core.Divert()
	}
	l.episodes.Lock()
	begins, ended := l.episodes.Raised(now, ev)
	l.episodes.Unlock()
	if ended != nil {
		l.log.WithFields(logrus.Fields{"suspicions": ended.Raised, "since": humanize.StampUTC(ended.Start)}).
			Infof("admission: the last episode of stall suspicions ended: %d over %s, each cleared by the engine's progress",
				ended.Raised, humanize.Rough(ended.End.Sub(ended.Start)))
	}
	n, _ := l.inflight.Snapshot()
	log := l.log.WithFields(logrus.Fields{"in_flight": n, "silence": ev.Silence.Round(time.Millisecond),
		"threshold": ev.Threshold.Round(time.Millisecond), "step": ev.Step.Round(time.Millisecond),
		"vigil_paused": ev.Paused.Round(time.Millisecond)})
	if ev.Started {
		log = log.WithFields(logrus.Fields{"overdue": "a stream under way", "waited": ev.Waited.Round(time.Millisecond),
			"prefill_ahead_tokens": ev.Ahead})
	} else {
		log = log.WithFields(logrus.Fields{"overdue": "a call with no first byte", "waited": ev.Waited.Round(time.Millisecond),
			"prompt_tokens": ev.Prompt, "prefill_ahead_tokens": ev.Ahead, "stream": ev.Stream})
	}
	switch {
	case !begins:
		log.Debug("admission: the engine is suspected stalled again (the same episode)")
	case peer:
		log.Warn("admission: the engine is suspected stalled (no progress for several of its step times with calls " +
			"in flight): new calls go to a peer until it progresses; further suspicions within a minute of this " +
			"episode's last are not logged (vigil_admission_stall_suspicions_total counts them)")
	default:
		log.Warn("admission: the engine is suspected stalled (no progress for several of its step times with calls " +
			"in flight); no peer to send calls to: none is refused for it meanwhile; further suspicions within a " +
			"minute of this episode's last are not logged (vigil_admission_stall_suspicions_total counts them)")
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
	l.episodes.Lock()
	n := l.episodes.Cleared(l.clock.Now())
	l.episodes.Unlock()
	log := l.log.WithField("episode_suspicions", n)
	if n == 1 {
		log.Info("admission: the engine progresses again; the suspicion was false")
	} else {
		log.Debug("admission: the engine progresses again; the suspicion was false")
	}
	if l.onSuspect != nil {
		l.onSuspect(false)
	}
}

// holdsEngine: nothing new goes to the engine (suspected or recovered).
func (l *Limiter) holdsEngine() bool { return l.Suspected() || l.out.Active() }

// peerFor is the pool peer a call may go to (nil: none), r its request
// (nil: any call); a call moved in from another vigil moves no further.
func (l *Limiter) peerFor(r *http.Request) *Peer {
	if l.peers == nil || (r != nil && r.Header.Get(engineloss.MovedFromHeader) != "") {
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
		if !l.holdsEngine() {
			return false // the engine is back (a peer's refusal, or called home): no other peer
		}
	}
	return false
}

// sendToPeer offers the call to p: taken when p answers it (streamed to
// the client), done when the client left meanwhile.
func (a *attempt) sendToPeer(p *Peer, body []byte) (done, taken bool) {
	l := a.l
	rl := l.newRelay(a.r, body)
	ctx, begun, stop := l.recallable(a.r.Context())
	defer stop()
	resp, err := l.transport.RoundTrip(l.relayRequest(ctx, rl, dest{peer: p}, body))
	if begun() {
		if err == nil {
			resp.Body.Close()
		}
		return false, false // it queues here, as queued at the verdict
	}
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
	m := meter{Meter: usage.Meter{Sent: l.clock.Now()}}
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
