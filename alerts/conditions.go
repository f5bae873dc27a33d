package alerts

import (
	"slices"
	"time"
)

// condition is the pager's memory of one standing condition (an odd
// endpoint, a probe failing for a reason other than load, metrics missing),
// persisted with the outbox.
type condition struct {
	Text string `json:"text"`
	// Since is the first of the current run of cycles that saw it, Seen
	// how many cycles that run holds.
	Since time.Time `json:"since"`
	Seen  int       `json:"seen"`
	// Paged: this episode of the condition was paged, in Incident ("":
	// outside any incident).
	Paged    bool   `json:"paged,omitempty"`
	Incident string `json:"incident,omitempty"`
	// Gone is the first of the current run of cycles without it, GoneFor
	// how many cycles that run holds (kept only once paged).
	Gone    time.Time `json:"gone,omitzero"`
	GoneFor int       `json:"gone_for,omitempty"`
}

// minConditionCycles: a condition pages only once this many cycles in a
// row saw it, however short the persistence time.
const minConditionCycles = 3

// conditionPolicy decides which standing conditions to page. One bad
// scrape (a body cut short, a 500) raises a condition and the next clears
// it; paging each would page a flaky /metrics every other cycle. So a
// condition pages once it has been seen on every cycle for PersistFor
// (and at least minConditionCycles), once per episode: it must then stay
// away as long before it can page again, and never twice in one incident.
// Cycles of vigil's own recovery do not count towards paging: a refused
// /v1/models while vigil restarts the engine is vigil's doing.
type conditionPolicy struct {
	PersistFor time.Duration
}

// observe applies the policy to one cycle's conditions; incident is the
// open incident's ID ("" when none). It returns the new memory and the
// topics to page now, sorted.
func (p conditionPolicy) observe(st map[string]condition, at time.Time, current map[string]string, incident string, recovering bool) (map[string]condition, []string) {
	next := make(map[string]condition, len(st)+len(current))
	var page []string
	for topic, text := range current {
		c, known := st[topic]
		if known && c.Paged && !c.Gone.IsZero() && p.over(c, at) && (incident == "" || incident != c.Incident) {
			c, known = condition{}, false // a new episode
		}
		if recovering && !c.Paged {
			continue // not counted, and the run starts again after recovery
		}
		if !known {
			c = condition{Since: at}
		}
		c.Text, c.Seen = text, c.Seen+1
		c.Gone, c.GoneFor = time.Time{}, 0
		if !c.Paged && c.Seen >= minConditionCycles && at.Sub(c.Since) >= p.PersistFor {
			c.Paged, c.Incident = true, incident
			page = append(page, topic)
		}
		next[topic] = c
	}
	for topic, c := range st {
		if _, seen := current[topic]; seen || !c.Paged {
			continue // an unpaged run broken by one clean cycle is forgotten
		}
		if c.Gone.IsZero() {
			c.Gone = at
		}
		c.GoneFor++
		next[topic] = c
	}
	slices.Sort(page)
	return next, page
}

// over reports whether a paged condition has stayed away long enough for
// its episode to be over.
func (p conditionPolicy) over(c condition, at time.Time) bool {
	return c.GoneFor >= minConditionCycles && at.Sub(c.Gone) >= p.PersistFor
}
