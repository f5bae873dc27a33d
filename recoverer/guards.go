package recoverer

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/util/humanize"
)

// guardLimits are the configured limits the time guards enforce.
type guardLimits struct {
	noRestarter bool          // restart.kind none
	grace       time.Duration // watchdog.startup_grace
	cooldown    time.Duration // restart.cooldown
	budget      int           // restart.budget
	window      time.Duration // restart.budget_window
}

// timeGuards checks that there is a restarter, then startup grace,
// cooldown and budget, in that order. It
// is a pure function of its inputs: engineStarted is when the engine last
// started (zero if unknown), history the times vigil restarted it.
//
// dry holds a dry run's would-be restarts. They pace the dry run as the
// restarts would pace a real one (cooldown, budget), said as would-be
// restarts, but never start a grace: nothing was restarted, so nothing
// is loading.
func timeGuards(now, engineStarted time.Time, history, dry []time.Time, l guardLimits) *recovery.Refusal {
	if l.noRestarter {
		return &recovery.Refusal{Guard: recovery.GuardNoRestarter, Reason: "the engine needs a restart and no restarter is configured " +
			"(restart.kind none): restart it by hand; vigil restores traffic once it is ready"}
	}
	started := engineStarted
	if real := lastOf(history); real.After(started) {
		started = real
	}
	all := append(append([]time.Time(nil), history...), dry...)
	sort.Slice(all, func(i, j int) bool { return all[i].Before(all[j]) })
	last := lastOf(all)
	restarted := "vigil restarted the engine"
	if len(dry) > 0 && last.Equal(lastOf(dry)) {
		restarted = "dry run: vigil would have restarted the engine"
	}
	history = all
	if !started.IsZero() && l.grace > 0 && now.Before(started.Add(l.grace)) {
		until := started.Add(l.grace)
		return &recovery.Refusal{Guard: recovery.GuardStartupGrace, Until: until, Reason: fmt.Sprintf(
			"engine started %s ago (at %s); it may still be loading: startup grace of %s lifts at %s",
			ago(now, started), humanize.StampUTC(started), humanize.Rough(l.grace), humanize.StampUTC(until))}
	}
	if !last.IsZero() && l.cooldown > 0 && now.Before(last.Add(l.cooldown)) {
		until := last.Add(l.cooldown)
		return &recovery.Refusal{Guard: recovery.GuardCooldown, Until: until, Reason: fmt.Sprintf(
			"%s %s ago (at %s); cooldown of %s lifts at %s", restarted,
			ago(now, last), humanize.StampUTC(last), humanize.Rough(l.cooldown), humanize.StampUTC(until))}
	}
	if l.budget > 0 {
		in := inWindow(history, now, l.window)
		if len(in) >= l.budget {
			// The window drops below the budget when the oldest
			// len-budget+1 restarts have left it.
			until := in[len(in)-l.budget].Add(l.window)
			return &recovery.Refusal{Guard: recovery.GuardBudget, Until: until, Reason: fmt.Sprintf(
				"restart budget spent: %d restarts in the last %s (budget %d); the next is allowed at %s",
				len(in), humanize.Rough(l.window), l.budget, humanize.StampUTC(until))}
		}
	}
	return nil
}

// poolLock checks the load balancer's state, the pool's lock. Before vigil
// drains (afterDrain false) it refuses when any other server of the
// backend is out of rotation, or when this server is out and vigil did not
// put it there (selfOurs false): an operator's drain is not vigil's to
// undo. After vigil drained itself it refuses only when another server is
// also out and sorts first by name: of two vigils that drained at the same
// moment, the later name backs off.
func poolLock(st balancer.State, selfOurs, afterDrain bool) *recovery.Refusal {
	if !st.Known {
		return nil
	}
	if !afterDrain && st.Self.Out() && !selfOurs {
		return &recovery.Refusal{Guard: recovery.GuardPoolLock, Reason: fmt.Sprintf(
			"%s/%s is already %s at the load balancer and vigil did not do it; vigil will not restart it or put it back",
			st.Self.Backend, st.Self.Server, outWord(st.Self))}
	}
	var blockers []string
	for _, o := range st.Others {
		if !o.Out() || (afterDrain && o.Server > st.Self.Server) {
			continue
		}
		blockers = append(blockers, fmt.Sprintf("%s (%s, %d sessions)", o.Server, outWord(o), o.Sessions))
	}
	if len(blockers) == 0 {
		return nil
	}
	sort.Strings(blockers)
	if afterDrain {
		return &recovery.Refusal{Guard: recovery.GuardPoolLock, Reason: fmt.Sprintf(
			"%s was drained at the same time and sorts first; %s backs off (put back in rotation) and retries later",
			strings.Join(blockers, ", "), st.Self.Server)}
	}
	return &recovery.Refusal{Guard: recovery.GuardPoolLock, Reason: fmt.Sprintf(
		"another member of backend %s is out of rotation: %s; only one member of a pool is drained at a time",
		st.Self.Backend, strings.Join(blockers, ", "))}
}

func outWord(s balancer.ServerStatus) string {
	if s.Maint {
		return "in maintenance"
	}
	return "drained"
}

// inWindow returns the times in (now-window, now], sorted.
func inWindow(history []time.Time, now time.Time, window time.Duration) []time.Time {
	var in []time.Time
	for _, t := range history {
		if t.After(now.Add(-window)) && !t.After(now) {
			in = append(in, t)
		}
	}
	sort.Slice(in, func(i, j int) bool { return in[i].Before(in[j]) })
	return in
}

func lastOf(ts []time.Time) time.Time {
	var last time.Time
	for _, t := range ts {
		if t.After(last) {
			last = t
		}
	}
	return last
}

func ago(now, t time.Time) string { return humanize.Rough(now.Sub(t)) }
