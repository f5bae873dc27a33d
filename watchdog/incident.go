package watchdog

import (
	"fmt"
	"time"
)

// severity orders states for an incident's Peak: hung and down outrank
// misconfigured, which outranks saturated, which outranks unknown.
func severity(s State) int {
	switch s {
	case StateHung, StateDown:
		return 5
	case StateMisconfigured:
		return 4
	case StateSaturated:
		return 3
	case StateUnknown:
		return 2
	case StateLoading:
		return 1
	}
	return 0
}

// tracker is the incident state machine. It is persisted as is.
type tracker struct {
	// Open is the incident in progress (nil when none).
	Open *Incident `json:"incident,omitempty"`
	// Last is the last incident that resolved (nil before the first), for
	// the status page.
	Last *Incident `json:"last_incident,omitempty"`
	// Seq numbers incidents so IDs stay unique within one second.
	Seq int `json:"incident_seq"`
	// UnknownSince is the first of the current run of unknown verdicts.
	UnknownSince time.Time `json:"unknown_since,omitzero"`
	// ProofSince is the last hung or down verdict of the open incident:
	// resolving it needs positive evidence after this (Params.ProofSince).
	// Persisted, so a vigil restarted on a hung idle engine does not take
	// its frozen gauges for health.
	ProofSince time.Time `json:"proof_since,omitzero"`
	// CalmSince is the first of the current run of healthy verdicts inside
	// an open incident that needed no recovery; it resolves once the run
	// has lasted the calm period (see observe).
	CalmSince time.Time `json:"calm_since,omitzero"`
}

// counts reports whether v opens (or keeps) an incident on its own: every
// state that pages, and unknown once it has lasted unknownAfter.
func (t *tracker) counts(v Verdict, unknownAfter time.Duration) bool {
	switch v.State {
	case StateSaturated, StateHung, StateDown, StateMisconfigured:
		return true
	case StateUnknown:
		return v.At.Sub(t.UnknownSince) >= unknownAfter
	}
	return false
}

// observe moves the state machine on with v. It returns the incident v
// belongs to (a copy; nil when none): the open one, or the one v just
// resolved. An incident opens on the first verdict that counts, follows
// every later state, and resolves on a healthy verdict unless a recovery
// is still busy.
//
// An incident that never needed a recovery (its peak is saturated,
// unknown or misconfigured) resolves only once the engine has stayed
// healthy for calm: an overload whose queue dips under saturated_waiting
// for a cycle or two (as it does with the limiter keeping it near that
// depth) is the same overload, not a RESOLVED and a new SATURATED page
// every few seconds. A hung or down incident resolves on its proof
// instead (ProofSince): its healthy verdict already needed counters
// rising or a probe completing.
func (t *tracker) observe(v Verdict, busy bool, unknownAfter, calm time.Duration, node string) (inc *Incident, opened, resolved bool) {
	if v.State != StateHealthy || t.Open == nil {
		t.CalmSince = time.Time{}
	}
	if v.State == StateUnknown {
		if t.UnknownSince.IsZero() {
			t.UnknownSince = v.At
		}
	} else {
		t.UnknownSince = time.Time{}
	}
	if v.Recovering && (v.State == StateDown || v.State == StateLoading) && t.Open != nil {
		// vigil's own restart of the engine: expected, not a new state.
		c := *t.Open
		return &c, false, false
	}
	defer func() {
		switch {
		case t.Open == nil:
			t.ProofSince = time.Time{}
		case v.State.NeedsRecovery():
			t.ProofSince = v.At
		}
	}()
	switch {
	case t.Open == nil && t.counts(v, unknownAfter):
		t.Seq++
		t.Open = &Incident{
			ID:     incidentID(node, v.At, t.Seq),
			Opened: v.At, State: v.State, Peak: v.State, Changed: v.At,
		}
		opened = true
	case t.Open == nil:
		return nil, false, false
	case v.State == StateHealthy && !busy && calm > 0 && !t.Open.Peak.NeedsRecovery() &&
		(t.CalmSince.IsZero() || v.At.Sub(t.CalmSince) < calm):
		if t.CalmSince.IsZero() {
			t.CalmSince = v.At
			t.Open.State, t.Open.Changed = StateHealthy, v.At
		}
	case v.State == StateHealthy && !busy:
		// Changed stays when the calm began: the trouble ended then, the
		// incident only now.
		if t.CalmSince.IsZero() || t.Open.State != StateHealthy {
			t.Open.Changed = v.At
		}
		t.CalmSince = time.Time{}
		t.Open.State, t.Open.Resolved = StateHealthy, v.At
		c := *t.Open
		t.Open, t.Last = nil, &c
		return &c, false, true
	case t.Open.State != v.State:
		t.Open.State, t.Open.Changed = v.State, v.At
		if severity(v.State) > severity(t.Open.Peak) {
			t.Open.Peak = v.State
		}
	}
	if v.State == StateSaturated && !v.Evidence.LimiterOnly {
		t.Open.EngineSaturated = true
	}
	c := *t.Open
	return &c, opened, false
}

// incidentID is unique (a sequence number) and stable (persisted with the
// incident), and sorts by time: "node1-20260301T030000Z-7".
func incidentID(node string, at time.Time, seq int) string {
	id := fmt.Sprintf("%s-%d", at.UTC().Format("20060102T150405Z"), seq)
	if node != "" {
		id = node + "-" + id
	}
	return id
}
