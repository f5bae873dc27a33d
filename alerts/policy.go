package alerts

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"time"

	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/watchdog"
)

// thread is the pager's memory of the current incident's pages. It is
// persisted with the outbox so a restarted vigil neither re-pages a head
// nor forgets that it did.
type thread struct {
	Incident string    `json:"incident"`
	Opened   time.Time `json:"opened"`
	// Headed: the head message was queued.
	Headed bool `json:"headed"`
	// Announced is the last state a page announced (head or change).
	Announced watchdog.State `json:"announced"`
	// Seen is the last state observed, held since SeenSince.
	Seen      watchdog.State `json:"seen"`
	SeenSince time.Time      `json:"seen_since"`
	// Quiet: a silent state (loading, healthy) was seen since the last
	// page, so the announced state coming back is a relapse.
	Quiet bool `json:"quiet,omitempty"`
	// LastPage is when the last head, change or update was queued; Print
	// the fingerprint of its evidence.
	LastPage time.Time `json:"last_page"`
	Print    string    `json:"print"`
	Resolved bool      `json:"resolved,omitempty"`
	// Guards are the refused-guard reasons already paged.
	Guards []string `json:"guards,omitempty"`
	// Refused is the guard refusing the restart now (from the recovery's
	// steps), so later pages say what will really happen.
	Refused *refusalNote `json:"refused,omitempty"`
	// Told is the refusal the last head, change or update announced
	// (from Refused or the recovery's outlook): a refused-guard step that
	// says the same is not paged again.
	Told *refusalNote `json:"told,omitempty"`
	// Restarting: vigil is restarting the engine (from the "restarting"
	// step until it is ready or the step failed); a DOWN verdict then is
	// the restart, not a new failure.
	Restarting bool `json:"restarting,omitempty"`
	// TroubleSince..TroubleUntil is the current stretch of the engine
	// hung or down, measured from the evidence (the stall's start, not the
	// incident's opening) to the first verdict out of it or vigil's
	// restart; TroubleTotal sums earlier stretches of the incident.
	TroubleSince time.Time     `json:"trouble_since,omitzero"`
	TroubleUntil time.Time     `json:"trouble_until,omitzero"`
	TroubleTotal time.Duration `json:"trouble_total,omitempty"`
	// TroubleBanked is where the stretches summed in TroubleTotal end: no
	// later stretch reaches back before it, so no moment counts twice.
	TroubleBanked time.Time `json:"trouble_banked,omitzero"`
	// RecoveryFrom is the recovery's first action (drain or restart),
	// RecoveryTo its end.
	RecoveryFrom time.Time `json:"recovery_from,omitzero"`
	RecoveryTo   time.Time `json:"recovery_to,omitzero"`
}

// refusalNote is a guard's refusal as the pages need it.
type refusalNote struct {
	Guard recovery.Guard `json:"guard"`
	Until time.Time      `json:"until,omitzero"`
	// Serving: the host could not be taken out of rotation either.
	Serving bool `json:"serving,omitempty"`
	// Dry: a dry run's refusal.
	Dry bool `json:"dry,omitempty"`
}

// trouble tracks how long the engine was hung or down, from the evidence.
func (t *thread) trouble(v watchdog.Verdict) {
	if !v.State.NeedsRecovery() {
		if !t.TroubleSince.IsZero() && t.TroubleUntil.IsZero() {
			t.TroubleUntil = v.At
		}
		return
	}
	if t.Restarting {
		return // the restart vigil is doing, not the engine failing
	}
	since := v.At
	if v.State == watchdog.StateHung {
		// The stall began before the hang was called: hang_after earlier.
		stalled := v.Evidence.Stalled
		if stalled <= 0 {
			stalled = v.Evidence.SinceProgress
		}
		since = v.At.Add(-stalled)
	}
	switch {
	case t.TroubleSince.IsZero():
		t.TroubleSince = since
		return
	case !t.TroubleUntil.IsZero() && since.After(t.TroubleUntil):
		// A relapse after the last stretch ended: bank it, start a new one.
		t.TroubleTotal += t.TroubleUntil.Sub(t.TroubleSince)
		t.TroubleBanked = t.TroubleUntil
		t.TroubleSince, t.TroubleUntil = since, time.Time{}
		return
	case !t.TroubleUntil.IsZero():
		// The evidence reaches back into the last stretch: the stall never
		// ended (a restart that did not help), so it is the same stretch,
		// going on. Starting a new one from the stall's start would count
		// the stall once per attempt.
		t.TroubleUntil = time.Time{}
	}
	if since.Before(t.TroubleSince) {
		t.TroubleSince = since
		if since.Before(t.TroubleBanked) {
			t.TroubleSince = t.TroubleBanked
		}
	}
}

// troubleFor is how long the engine was hung or down by closed.
func (t thread) troubleFor(closed time.Time) time.Duration {
	if t.TroubleSince.IsZero() {
		return 0
	}
	until := t.TroubleUntil
	if until.IsZero() {
		until = closed
	}
	return t.TroubleTotal + max(until.Sub(t.TroubleSince), 0)
}

// decision is one page the policy asks for.
type decision struct {
	Kind Kind
	// From is the state announced before a change; Again marks a relapse
	// into the state already announced.
	From  watchdog.State
	Again bool
}

// policy is the paging policy: what to page for a verdict, as a pure
// function of the thread so far, the verdict, the incident and now.
type policy struct {
	// UpdateEvery: evidence updates at most this often.
	UpdateEvery time.Duration
	// UnknownAfter: inside an open incident, a change to unknown pages only
	// once unknown has lasted this long (a scrape blip is not news). An
	// incident that opens as unknown pages at once: the watchdog opens it
	// only after unknown_after.
	UnknownAfter time.Duration
}

// loud reports whether a state is worth telling a human about. Loading and
// healthy inside an open incident are the recovery's own story: the steps
// and the resolve tell it.
func loud(s watchdog.State) bool {
	switch s {
	case watchdog.StateHung, watchdog.StateDown, watchdog.StateSaturated,
		watchdog.StateMisconfigured, watchdog.StateUnknown:
		return true
	}
	return false
}

// observe applies the policy to one verdict: state changes page, steady
// states do not; one head per incident; evidence updates at most every
// UpdateEvery and only if the evidence changed; a resolve when the
// incident resolves.
func (p policy) observe(t thread, v watchdog.Verdict, inc *watchdog.Incident, now time.Time) (thread, []decision) {
	if inc == nil {
		// The watchdog let the incident go without a resolving verdict:
		// close the thread if the engine is healthy, so no thread is left
		// hanging open.
		if t.Headed && !t.Resolved && v.State == watchdog.StateHealthy {
			t.Resolved = true
			return t, []decision{{Kind: KindResolve}}
		}
		return t, nil
	}
	if inc.ID != t.Incident {
		t = thread{Incident: inc.ID, Opened: inc.Opened}
	}
	if v.Recovering && (v.State == watchdog.StateDown || v.State == watchdog.StateLoading) {
		// vigil's own restart of the engine: the recovery's steps say it.
		return t, nil
	}
	if v.State != t.Seen {
		t.Seen, t.SeenSince = v.State, now
	}
	if !v.At.IsZero() {
		t.trouble(v)
	}
	if !inc.Open() {
		if t.Headed && !t.Resolved {
			t.Resolved = true
			return t, []decision{{Kind: KindResolve}}
		}
		t.Resolved = true
		return t, nil
	}
	if t.Resolved {
		// Reopened under the same ID: whatever comes next is a relapse.
		t.Resolved, t.Quiet = false, true
	}
	if !loud(v.State) || (v.State == watchdog.StateDown && t.Restarting) {
		// Down while vigil restarts the engine is expected: the
		// "restarting" step said so (a verdict the watchdog marked as
		// Recovering never gets here).
		if t.Headed {
			t.Quiet = true
		}
		return t, nil
	}
	if !t.Headed {
		t.Headed, t.Announced, t.Quiet = true, v.State, false
		t.LastPage, t.Print = now, fingerprint(v)
		return t, []decision{{Kind: KindHead}}
	}
	switch {
	case v.State != t.Announced:
		if v.State == watchdog.StateUnknown && now.Sub(t.SeenSince) < p.UnknownAfter {
			return t, nil
		}
		from := t.Announced
		t.Announced, t.Quiet = v.State, false
		t.LastPage, t.Print = now, fingerprint(v)
		return t, []decision{{Kind: KindChange, From: from}}
	case t.Quiet && v.State.NeedsRecovery():
		// Hung or down again after a restart: that is news. Saturation
		// coming back after a healthy blip is the same saturation.
		t.Quiet = false
		t.LastPage, t.Print = now, fingerprint(v)
		return t, []decision{{Kind: KindChange, From: v.State, Again: true}}
	case now.Sub(t.LastPage) >= p.UpdateEvery && fingerprint(v) != t.Print:
		t.Quiet = false
		t.LastPage, t.Print = now, fingerprint(v)
		return t, []decision{{Kind: KindUpdate}}
	}
	return t, nil
}

// step applies the policy to a recovery step: every step pages, in order,
// except a refused guard already paged for this incident with the same
// reason (the recoverer may be asked again every cycle).
func (p policy) step(t thread, s recovery.Step) (thread, bool) {
	if s.Incident == t.Incident {
		t = t.followStep(s)
	}
	if s.Name != recovery.StepGuardRefused || s.Incident != t.Incident {
		return t, true
	}
	key := shape(s.Detail)
	if slices.Contains(t.Guards, key) {
		return t, false
	}
	t.Guards = append(slices.Clip(t.Guards), key)
	if told := t.Told; told != nil && told.Guard == s.Guard && told.Serving == s.Serving &&
		told.Dry == s.DryRun && told.Until.Equal(s.Until) {
		return t, false // the incident's last page said just this
	}
	return t, true
}

// followStep keeps what later pages must know of the recovery: the guard
// refusing the restart, a restart in progress, and when recovery began
// and ended.
func (t thread) followStep(s recovery.Step) thread {
	if s.DryRun && s.Name != recovery.StepGuardRefused {
		return t // a dry run changes nothing the pages must follow
	}
	begin := func() {
		if t.RecoveryFrom.IsZero() {
			t.RecoveryFrom = s.At
		}
	}
	switch s.Name {
	case recovery.StepGuardRefused:
		t.Refused = &refusalNote{Guard: s.Guard, Until: s.Until, Dry: s.DryRun, Serving: s.Serving}
	case recovery.StepDrain:
		if s.OK {
			begin()
		}
	case recovery.StepRestarting:
		begin()
		if !t.TroubleSince.IsZero() && (t.TroubleUntil.IsZero() || t.Restarting) {
			// The hang ends where vigil restarts the engine. Restarting
			// again before the first restart was ready (a vigil stopped
			// during the step, whose restart never ran) moves that end:
			// the engine stayed hung until this one.
			t.TroubleUntil = s.At
		}
		t.Restarting, t.Refused = true, nil
	case recovery.StepRestart, recovery.StepRestartSkipped:
		begin()
		t.Refused = nil
	case recovery.StepWaitReady, recovery.StepFailed:
		t.Restarting = false
	case recovery.StepRestore:
		t.Refused = nil
	case recovery.StepResolved:
		t.Restarting, t.Refused, t.RecoveryTo = false, nil, s.At
	}
	return t
}

// fingerprint is the evidence as far as a human would call it a change:
// the state, the orders of magnitude of the queue and the throughput, and
// the outcomes of the endpoints with their timings blurred. A hung
// engine's frozen gauges keep the same fingerprint however long it hangs;
// a saturated queue that doubles changes it.
func fingerprint(v watchdog.Verdict) string {
	e := v.Evidence
	return fmt.Sprintf("%s|w%d|r%d|t%d|m=%s|h=%s|p=%s|x=%s", v.State,
		magnitude(e.Waiting), magnitude(e.Running), magnitude(e.TokensPerSec),
		shape(e.Models), shape(e.Health), shape(e.Probe), shape(e.MetricsError))
}

// magnitude is 0 for nothing, else 1 + floor(log2(x)).
func magnitude(x float64) int {
	if !(x >= 1) {
		return 0
	}
	return 1 + int(math.Floor(math.Log2(x)))
}

// timings matches the durations inside outcome strings ("200 in 4ms",
// "outstanding for 3m05s"), which move every cycle without meaning
// anything new.
var timings = regexp.MustCompile(`([0-9]+(\.[0-9]+)?(ns|µs|us|ms|s|m|h))+`)

// shape is an outcome string with its timings blurred.
func shape(s string) string { return timings.ReplaceAllString(s, "#") }
