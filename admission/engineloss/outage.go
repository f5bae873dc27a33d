package engineloss

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/recovery"
)

// Outage is the engine's recovery as the limiter sees it, and what became
// of the calls it cut. The zero value is ready: no outage.
type Outage struct {
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
	// prev is the last outage's fate once a suspicion opened a window
	// after it: until a verdict makes the new window an outage, the last
	// outage is what Snapshot says (a false suspicion as the restarted
	// engine ramps must not wipe the recovery's count before its page).
	prev *Fate
}

// defaultOutage is the expected length of a recovery before one was seen:
// a drain, a restart and a model load.
const defaultOutage = 90 * time.Second

// Fate is what became of the calls in flight when the engine was lost,
// over the last outage (the recovery's page says it): the recovery's own
// vocabulary, so the page reads what the limiter counted.
type Fate = recovery.CallFate

func cloneFate(f Fate) Fate {
	f.MovedTo, f.Lost, f.Refused = maps.Clone(f.MovedTo), maps.Clone(f.Lost), maps.Clone(f.Refused)
	return f
}

// Begin starts an outage at the verdict; lastSent is when the limiter
// last sent the engine a call. False when one is already on.
func (o *Outage) Begin(now, lastSent time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.on {
		return false
	}
	o.on, o.began, o.ready = true, now, make(chan struct{})
	o.openLocked(now)
	o.fate.Verdict, o.fate.LastSent = now, lastSent
	o.prev = nil
	return true
}

// Open opens a hang window's accounting at a suspicion (the verdict, if
// it comes, keeps counting in it).
func (o *Outage) Open(now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.openLocked(now)
}

func (o *Outage) openLocked(now time.Time) {
	if o.window {
		return
	}
	if !o.fate.Verdict.IsZero() {
		f := o.snapshotLocked()
		o.prev = &f
	}
	o.fate, o.waits, o.window = Fate{Opened: now}, nil, true
}

// Released counts a call held for the restarted engine that waited d,
// from its cut to its release.
func (o *Outage) Released(d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.fate.HeldWaitMax = max(o.fate.HeldWaitMax, d)
}

// CloseFalse closes the window of a suspicion progress cleared: the next
// one starts afresh (what this one moved stays counted until then).
func (o *Outage) CloseFalse() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.on {
		o.window = false
	}
}

// maxWaits bounds the waits kept for the window's percentiles.
const maxWaits = 4096

// Queued counts a call served after waiting d in the queue while the
// engine was held.
func (o *Outage) Queued(d time.Duration) {
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

// End ends the outage: held calls go to the engine again.
func (o *Outage) End(now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.on {
		return
	}
	o.on = false
	o.window = false
	o.last = now.Sub(o.began)
	o.fate.Ended = now
	close(o.ready)
}

// WaitCh is closed when the outage ends; nil when none is on.
func (o *Outage) WaitCh() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.on {
		return nil
	}
	return o.ready
}

func (o *Outage) Active() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.on
}

// Expected is how long the outage under way may still last (the last
// one's length, less what has passed), at least a second.
func (o *Outage) Expected(now time.Time) time.Duration {
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

// Note records a call's fate.
func (o *Outage) Note(f func(*Fate)) {
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

func (o *Outage) Hold(d int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.held += d
}

// Snapshot is the fate of the last (or current) outage's calls and how
// many are held now; before any outage, the last suspicion's window.
func (o *Outage) Snapshot() (Fate, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.prev != nil {
		return cloneFate(*o.prev), o.held
	}
	return o.snapshotLocked(), o.held
}

func (o *Outage) snapshotLocked() Fate {
	f := cloneFate(o.fate)
	if len(o.waits) > 0 {
		w := slices.Clone(o.waits)
		slices.Sort(w)
		f.WaitP50 = w[len(w)/2]
	}
	return f
}
