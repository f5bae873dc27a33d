package engineloss

import "time"

// EpisodeGap: a suspicion raised within it of the last one's end belongs
// to the same episode. A healthy engine the watch misjudges (a slow
// model's prefills on a loaded machine) can raise and clear a suspicion
// every few seconds: the operator reads one line for the episode, with
// the evidence of its first suspicion, not one a raise; /metrics counts
// every one.
const EpisodeGap = time.Minute

// Episodes groups suspicions into episodes for the log. The zero value
// has seen none. Not safe for concurrent use: the stall watch's loop
// alone calls it.
type Episodes struct {
	on             bool // a suspicion is raised now
	start, lastEnd time.Time
	raised         int // in the episode
	// Evidence is what raised the episode's first suspicion.
	Evidence Evidence
}

// Episode is a finished episode, for its summary line.
type Episode struct {
	Start, End time.Time
	Raised     int
	Evidence   Evidence
}

// Raised notes a suspicion raised at now; begins reports whether it
// begins an episode (log it, with ev); ended, when not nil, is the
// episode before it, over now.
func (e *Episodes) Raised(now time.Time, ev Evidence) (begins bool, ended *Episode) {
	if e.raised > 0 && !e.on && now.Sub(e.lastEnd) < EpisodeGap {
		e.on = true
		e.raised++
		return false, nil
	}
	if e.raised > 0 {
		ended = &Episode{Start: e.start, End: e.lastEnd, Raised: e.raised, Evidence: e.Evidence}
	}
	*e = Episodes{on: true, start: now, raised: 1, Evidence: ev}
	return true, ended
}

// Cleared notes a suspicion that progress cleared at now; it reports the
// suspicions raised in the episode so far.
func (e *Episodes) Cleared(now time.Time) int {
	e.on = false
	e.lastEnd = now
	return e.raised
}

// Confirmed notes the verdict: the suspicion was true, its episode ends.
func (e *Episodes) Confirmed() { *e = Episodes{} }
