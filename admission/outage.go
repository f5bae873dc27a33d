package admission

import (
	"errors"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"
)

// When the watchdog declares the engine hung or down and its recovery
// begins (SetRecovering), nothing more goes to the engine: every call in
// flight on it is cut (it would never answer), and its execution moves
// instead of failing. A call none of whose answer was sent is sent again
// with the body vigil holds: to a pool peer's limiter when one can take
// it, else held until the restarted engine is ready. A stream under way
// is continued (continuation.go). What cannot be moved ends with a
// retryable error that says why. The outage ends when the recovery does.

// errEngineLost is the cause an upstream call is cut with when the
// engine is declared lost.
var errEngineLost = errors.New("admission: the engine is being recovered")

// outage is the engine's recovery as the limiter sees it, and what became
// of the calls it cut.
type outage struct {
	mu    sync.Mutex
	on    bool
	began time.Time
	ready chan struct{} // closed when the outage ends
	// last is how long the last outage lasted: the estimate of the next
	// (Retry-After, and which queued calls can wait for it).
	last time.Duration
	// held counts the calls waiting for the engine now.
	held int
	fate Fate
	// window: a hang window's accounting is open (a suspicion or an
	// outage began it); fate counts what the hang cost until the next.
	window bool
	waits  []time.Duration // the waits of calls held in the queue (Fate.Queued), bounded
}

// defaultOutage is the expected length of a recovery before one was seen:
// a drain, a restart and a model load.
const defaultOutage = 90 * time.Second

// Fate is what became of the calls in flight when the engine was lost,
// over the last outage (the recovery's page says it).
type Fate struct {
	// MovedTo counts calls answered by each pool peer they moved to.
	MovedTo map[string]int `json:"moved_to,omitempty"`
	// Held counts calls held for the restarted engine; Continued the
	// streams continued (on the engine or a peer) after being cut.
	Held      int `json:"held"`
	Continued int `json:"continued"`
	// Lost counts calls ended with an error, by why.
	Lost map[string]int `json:"lost,omitempty"`
	// Refused counts calls the limiter itself answered 503 while the
	// engine was held (suspected stalled, recovered, or ramping after the
	// restart), by reason: what the hang cost beyond the calls it cut.
	Refused map[string]int `json:"refused,omitempty"`
	// Queued counts calls that waited in vigil's queue while the engine
	// was held, and were served; WaitP50 and WaitMax are their waits.
	Queued  int           `json:"queued,omitempty"`
	WaitP50 time.Duration `json:"wait_p50_ns,omitempty"`
	WaitMax time.Duration `json:"wait_max_ns,omitempty"`
}

// Moved is the calls moved to peers.
func (f Fate) Moved() int {
	n := 0
	for _, c := range f.MovedTo {
		n += c
	}
	return n
}

// LostTotal is the calls lost: cut and ended with an error, or refused
// while the engine was held.
func (f Fate) LostTotal() int {
	n := 0
	for _, c := range f.Lost {
		n += c
	}
	for _, c := range f.Refused {
		n += c
	}
	return n
}

// Peers names the peers calls moved to, most first.
func (f Fate) Peers() []string {
	names := make([]string, 0, len(f.MovedTo))
	for n := range f.MovedTo {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if f.MovedTo[names[i]] != f.MovedTo[names[j]] {
			return f.MovedTo[names[i]] > f.MovedTo[names[j]]
		}
		return names[i] < names[j]
	})
	return names
}

func (f Fate) clone() Fate {
	f.MovedTo, f.Lost, f.Refused = maps.Clone(f.MovedTo), maps.Clone(f.Lost), maps.Clone(f.Refused)
	return f
}

// begin starts an outage; false when one is already on.
func (o *outage) begin(now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.on {
		return false
	}
	o.on, o.began, o.ready = true, now, make(chan struct{})
	if !o.window {
		o.fate, o.waits, o.window = Fate{}, nil, true
	}
	return true
}

// open opens a hang window's accounting at a suspicion (the verdict, if
// it comes, keeps counting in it).
func (o *outage) open(time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.window {
		o.fate, o.waits, o.window = Fate{}, nil, true
	}
}

// closeFalse closes the window of a suspicion progress cleared: the next
// one starts afresh (what this one moved stays counted until then).
func (o *outage) closeFalse() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.on {
		o.window = false
	}
}

// maxWaits bounds the waits kept for the window's percentiles.
const maxWaits = 4096

// queued counts a call served after waiting d in the queue while the
// engine was held.
func (o *outage) queued(d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fate.MovedTo == nil {
		o.fate.MovedTo, o.fate.Lost = map[string]int{}, map[string]int{}
	}
	o.fate.Queued++
	o.fate.WaitMax = max(o.fate.WaitMax, d)
	if len(o.waits) < maxWaits {
		o.waits = append(o.waits, d)
	}
}

// end ends the outage: held calls go to the engine again.
func (o *outage) end(now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.on {
		return
	}
	o.on = false
	o.window = false
	o.last = now.Sub(o.began)
	close(o.ready)
}

// waitCh is closed when the outage ends; nil when none is on.
func (o *outage) waitCh() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.on {
		return nil
	}
	return o.ready
}

func (o *outage) active() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.on
}

// expected is how long the outage under way may still last (the last
// one's length, less what has passed), at least a second.
func (o *outage) expected(now time.Time) time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := o.last
	if d <= 0 {
		d = defaultOutage
	}
	if o.on {
		d -= now.Sub(o.began)
	}
	return max(d, time.Second)
}

// note records a call's fate.
func (o *outage) note(f func(*Fate)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fate.MovedTo == nil {
		o.fate.MovedTo, o.fate.Lost = map[string]int{}, map[string]int{}
	}
	if o.fate.Refused == nil {
		o.fate.Refused = map[string]int{}
	}
	f(&o.fate)
}

func (o *outage) hold(d int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.held += d
}

// snapshot is the fate of the last (or current) outage's calls and how
// many are held now.
func (o *outage) snapshot() (Fate, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f := o.fate.clone()
	if len(o.waits) > 0 {
		w := slices.Clone(o.waits)
		slices.Sort(w)
		f.WaitP50 = w[len(w)/2]
	}
	return f, o.held
}

// Peer is another vigil's limiter a call may move to.
type Peer struct {
	// Node names it in pages and metrics; URL is its admission proxy's
	// base URL (http://host:port).
	Node, URL string
}

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
		l.out.end(now)
		l.core.SetRecovering(false)
		return
	}
	if !l.out.begin(now) {
		return
	}
	l.core.SetRecovering(true)
	l.confirmStall(now)
	// The calls stuck on the engine first: they are the oldest, and a
	// peer's queue takes moved calls in the order they come.
	l.inflight.interruptAll(errEngineLost)
	if l.peerFor(nil) != nil {
		l.core.Divert() // answered soonest by a peer than by a restart
	}
}

// RequestFate is what became of the calls cut by the last (or current)
// engine outage, and how many are held for the engine now. With moving
// off (max_moves 0) nothing is cut and nothing counted here: the calls
// fail with the engine, as upstream errors.
func (l *Limiter) RequestFate() (Fate, int) { return l.out.snapshot() }
