package admission

import (
	"errors"
	"time"

	"github.com/vigil-dev/vigil/admission/engineloss"
)

// When the watchdog declares the engine hung or down and its recovery
// begins (SetRecovering), nothing more goes to the engine: every call in
// flight on it is cut (it would never answer), and its execution moves
// instead of failing. A call none of whose answer was sent is sent again
// with the body vigil holds: to a pool peer's limiter when one can take
// it, else held until the restarted engine is ready. A stream under way
// is continued (engineloss.Continuation). What cannot be moved ends with
// a retryable error that says why. The outage ends when the recovery does.
// The outage's state and its accounting are engineloss.Outage.

// Fate is what became of the calls in flight when the engine was lost
// (engineloss.Fate).
type Fate = engineloss.Fate

// errEngineLost is the cause an upstream call is cut with when the
// engine is declared lost.
var errEngineLost = errors.New("admission: the engine is being recovered")

// Peer is another vigil's limiter a call may move to (engineloss.Peer).
type Peer = engineloss.Peer

// WithPeers sets where calls cut by a lost engine may move: peers returns
// the pool members able to take work now, best first (nil: none).
func WithPeers(peers func() []Peer) Option { return func(l *Limiter) { l.peers = peers } }

// WithNode names this vigil to its peers (X-Vigil-Moved-From).
func WithNode(name string) Option { return func(l *Limiter) { l.node = name } }

// SetRecovering marks the engine as being recovered (hung or down: the
// watchdog's recovery drains and restarts it). While on, nothing goes to
// the engine: new requests get 503 with Retry-After the expected rest of
// the recovery, queued ones stay queued when their timeout outlasts that
// and get the same 503 otherwise, and the calls in flight on the engine
// are moved (see outage). Clearing it sends held calls to the engine
// again; it does not start a slow start by itself: the recovery calls
// SlowStart once the engine is back.
func (l *Limiter) SetRecovering(on bool) {
	now := l.clock.Now()
	if !on {
		l.out.End(now)
		l.core.SetRecovering(false)
		return
	}
	var last time.Time
	if ns := l.lastSent.Load(); ns != 0 {
		last = time.Unix(0, ns)
	}
	if !l.out.Begin(now, last) {
		return
	}
	l.core.SetRecovering(true)
	if l.sus.Confirmed(now) {
		l.core.SetSuspected(false, false) // the recovery holds the engine now
		l.episodes.Lock()
		l.episodes.Confirmed()
		l.episodes.Unlock()
	}
	// The calls stuck on the engine first: they are the oldest, and a
	// peer's queue takes moved calls in the order they come.
	l.inflight.InterruptAll(errEngineLost)
	if l.peerFor(nil) != nil {
		l.core.Divert() // answered soonest by a peer than by a restart
	}
}

// RequestFate is what became of the calls cut by the last (or current)
// engine outage, and how many are held for the engine now. With moving
// off (max_moves 0) nothing is cut and nothing counted here: the calls
// fail with the engine, as upstream errors.
func (l *Limiter) RequestFate() (Fate, int) { return l.out.Snapshot() }
