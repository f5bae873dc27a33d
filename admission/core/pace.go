package core

import "time"

// paceEvents: a rate measured over completionSpan that holds fewer events
// than this is measured over the last paceEvents events instead. Ten
// seconds hold fifteen of the paper's calls on the engine the limiter was
// first measured on, and one or none on an engine twenty times slower,
// where the queue's order and its Retry-After then swung between "drains
// at once" and "never drains" from one admission to the next.
const paceEvents = 16

// eventRate is the rate of an event (admissions, completions): over the
// last completionSpan while that holds paceEvents of them, as always;
// otherwise over the last paceEvents events, however long they took, so
// the span follows the engine's own pace.
type eventRate struct {
	recent *slidingSum
	times  [paceEvents]time.Time // ring of the latest events
	next   int
}

func newEventRate() *eventRate { return &eventRate{recent: newSlidingSum(completionSpan, 10)} }

func (r *eventRate) add(now time.Time) {
	r.recent.add(now, 1)
	r.times[r.next] = now
	r.next = (r.next + 1) % paceEvents
}

// perSecond is the rate at now. span is the time the recent sum is taken
// over (completionSpan, or less for a busy period that began later);
// since: events before it do not count in the longer measure (zero: all
// do).
func (r *eventRate) perSecond(now time.Time, span time.Duration, since time.Time) float64 {
	n := r.recent.sum(now)
	fallback := n / span.Seconds()
	if n >= paceEvents {
		return fallback
	}
	// The events kept, oldest first, from since on.
	var oldest time.Time
	k := 0
	for i := range paceEvents {
		t := r.times[(r.next+i)%paceEvents]
		if t.IsZero() || t.Before(since) || t.After(now) {
			continue
		}
		if k == 0 {
			oldest = t
		}
		k++
	}
	// Only when they reach back past the recent span do they say more;
	// the k-1 intervals between them, stretched to now, are the rate.
	if k < 2 || now.Sub(oldest) <= span {
		return fallback
	}
	return float64(k-1) / now.Sub(oldest).Seconds()
}
