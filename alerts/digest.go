package alerts

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/util/humanize"
	"github.com/vigil-dev/vigil/watchdog"
)

// Digest tallies what vigil saw and did since the last digest, for the
// daily digest page: incidents by peak state, restarts, guard refusals,
// time spent in each state, pages sent and the overrides in force. It sits
// beside the Pager on the same verdicts and recovery steps.
type Digest struct {
	now func() time.Time

	mu        sync.Mutex
	since     time.Time
	incidents map[string]watchdog.State // incident ID -> peak
	restarts  int
	refusals  int
	failures  int
	inState   map[watchdog.State]time.Duration
	last      watchdog.State
	lastAt    time.Time
}

// NewDigest starts a tally at now().
func NewDigest(now func() time.Time) *Digest {
	if now == nil {
		now = time.Now
	}
	d := &Digest{now: now}
	d.resetLocked(now())
	return d
}

func (d *Digest) resetLocked(at time.Time) {
	d.since = at
	d.incidents = map[string]watchdog.State{}
	d.restarts, d.refusals, d.failures = 0, 0, 0
	d.inState = map[watchdog.State]time.Duration{}
	if !d.lastAt.IsZero() {
		d.lastAt = at
	}
}

// Observe implements watchdog.Pager: each verdict's state is charged the
// time since the previous verdict.
func (d *Digest) Observe(v watchdog.Verdict, inc *watchdog.Incident) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.lastAt.IsZero() && v.At.After(d.lastAt) {
		d.inState[d.last] += v.At.Sub(d.lastAt)
	}
	d.last, d.lastAt = v.State, v.At
	if inc != nil {
		d.incidents[inc.ID] = inc.Peak
	}
}

// RecoveryStep implements recovery.Reporter.
func (d *Digest) RecoveryStep(s recovery.Step) {
	if s.DryRun {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch s.Name {
	case recovery.StepRestart:
		if s.OK {
			d.restarts++
		}
	case recovery.StepGuardRefused:
		d.refusals++
	case recovery.StepFailed:
		d.failures++
	}
}

// Report renders the digest and starts a new tally. pagesSent is the
// pager's count over the same period; overrides lists those in force.
func (d *Digest) Report(node string, pagesSent uint64, overrides []string) string {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.lastAt.IsZero() && now.After(d.lastAt) {
		d.inState[d.last] += now.Sub(d.lastAt)
		d.lastAt = now
	}
	var b strings.Builder
	fmt.Fprintf(&b, "vigil digest for %s, %s to %s\n", node, d.since.UTC().Format("Jan 2 15:04"), now.UTC().Format("Jan 2 15:04 MST"))

	byPeak := map[watchdog.State]int{}
	for _, peak := range d.incidents {
		byPeak[peak]++
	}
	if len(d.incidents) == 0 {
		b.WriteString("incidents: none\n")
	} else {
		fmt.Fprintf(&b, "incidents: %d (%s)\n", len(d.incidents), joinCounts(byPeak))
	}
	fmt.Fprintf(&b, "restarts: %d; guard refusals: %d; recovery failures: %d\n", d.restarts, d.refusals, d.failures)
	fmt.Fprintf(&b, "time saturated: %s; hung or down: %s; unknown: %s\n",
		humanize.GoMinutes(d.inState[watchdog.StateSaturated]),
		humanize.GoMinutes(d.inState[watchdog.StateHung]+d.inState[watchdog.StateDown]),
		humanize.GoMinutes(d.inState[watchdog.StateUnknown]))
	fmt.Fprintf(&b, "pages sent: %d\n", pagesSent)
	if len(overrides) == 0 {
		b.WriteString("overrides in force: none")
	} else {
		fmt.Fprintf(&b, "overrides in force: %s", strings.Join(overrides, "; "))
	}
	d.resetLocked(now)
	return b.String()
}

func joinCounts(m map[watchdog.State]int) string {
	keys := make([]string, 0, len(m))
	for s := range m {
		keys = append(keys, string(s))
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", m[watchdog.State(k)], k)
	}
	return strings.Join(parts, ", ")
}
