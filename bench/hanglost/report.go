package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/util/humanize"
)

// When a call started, against the fault.
const (
	beforeHang    = iota // started and ended before the hang
	atHang               // started before the hang, not ended by it
	hangToVerdict        // started while the engine hung, before the verdict
	inRecovery           // started during the recovery
	afterReady           // started after the restarted engine was ready
	groups
)

var groupNames = [groups]string{"ended before the hang", "in flight at the hang", "started between the hang and the verdict",
	"started during the recovery", "started after the restart"}

// figures is one arm's measure.
type figures struct {
	// Of the calls in flight at the hang, by their attempt in flight then
	// (the first to end after it): answered with the right text, answered
	// with another (a stream's text, ids or [DONE] not the uninterrupted
	// one's), or lost: the client saw a reset, an error status or an
	// error event.
	atHang, right, wrong, lost int
	lostBy                     map[string]int
	// rescued: lost, then answered right by an SDK retry.
	rescued int
	// Over every call.
	total, delivered, deliveredWrong, unfinished int
	p50, p99                                     time.Duration
	group                                        [groups]struct {
		n, delivered int
		lat          []time.Duration
	}
	// The hang window: calls never answered (streams among them), and the
	// latency p50/p99 of the calls started after the hang against those
	// ended before it (the same arm's baseline).
	neverAnswered, streamsNever              int
	afterP50, afterP99, beforeP50, beforeP99 time.Duration
	// The calls in flight at the verdict (started before it, not ended by
	// it: stuck on the hung engine, or waiting in vigil's queue): how
	// many, how many never answered, and the delivered ones' time from the
	// verdict to their answer and from their start.
	atVerdict, verdictNever int
	fromVerdict, verdictLat []time.Duration
}

// measure sorts an arm's calls; want is each call's expected text.
func measure(r *armRun, calls []call, want []string) figures {
	f := figures{lostBy: map[string]int{}}
	var lat, before, after []time.Duration
	for i, res := range r.results {
		if len(res.attempts) == 0 {
			continue // never sent: the run was stopped
		}
		f.total++
		g := groupOf(r, res)
		f.group[g].n++
		right := func(a *attempt) bool { return answerRight(a, calls[i], want[i]) }
		if d := res.delivered(); d != nil {
			f.delivered++
			f.group[g].delivered++
			f.group[g].lat = append(f.group[g].lat, res.end-res.start)
			lat = append(lat, res.end-res.start)
			switch {
			case g == beforeHang:
				before = append(before, res.end-res.start)
			case g != atHang:
				after = append(after, res.end-res.start)
			}
			if !right(d) {
				f.deliveredWrong++
			}
		} else {
			f.neverAnswered++
			if calls[i].kind.stream() {
				f.streamsNever++
			}
		}
		if a := res.attempts[len(res.attempts)-1]; a.outcome == cancelled {
			f.unfinished++
		}
		if res.start < r.verdictAt && res.end > r.verdictAt {
			f.atVerdict++
			if res.delivered() != nil {
				f.fromVerdict = append(f.fromVerdict, res.end-r.verdictAt)
				f.verdictLat = append(f.verdictLat, res.end-res.start)
			} else {
				f.verdictNever++
			}
		}
		if g != atHang {
			continue
		}
		f.atHang++
		k := slices.IndexFunc(res.attempts, func(a attempt) bool { return a.end > r.hangAt })
		if k < 0 {
			k = len(res.attempts) - 1
		}
		a := &res.attempts[k]
		switch {
		case a.outcome == okAnswer && right(a):
			f.right++
		case a.outcome == okAnswer:
			f.wrong++
		default:
			f.lost++
			f.lostBy[lostHow(a)]++
			if d := res.delivered(); d != nil && right(d) {
				f.rescued++
			}
		}
	}
	f.p50, f.p99 = harness.Percentile(lat, 50), harness.Percentile(lat, 99)
	f.beforeP50, f.beforeP99 = harness.Percentile(before, 50), harness.Percentile(before, 99)
	f.afterP50, f.afterP99 = harness.Percentile(after, 50), harness.Percentile(after, 99)
	return f
}

func groupOf(r *armRun, res result) int {
	switch {
	case res.start < r.hangAt && res.end <= r.hangAt:
		return beforeHang
	case res.start < r.hangAt:
		return atHang
	case res.start < r.verdictAt:
		return hangToVerdict
	case res.start < r.readyAt:
		return inRecovery
	}
	return afterReady
}

// answerRight: a whole answer with the uninterrupted text (a stream: one
// id, one [DONE]).
func answerRight(a *attempt, c call, want string) bool {
	if a.outcome != okAnswer || a.text != want {
		return false
	}
	return !c.kind.stream() || (len(a.ids) == 1 && a.dones == 1)
}

// lostHow names what the client saw of a lost attempt.
func lostHow(a *attempt) string {
	switch a.outcome {
	case httpError:
		if a.code != "" && a.code != strconv.Itoa(a.status) {
			return fmt.Sprintf("%d %s", a.status, a.code)
		}
		return strconv.Itoa(a.status)
	case errorEvent:
		return "error event " + a.code
	case cancelled:
		return "unfinished"
	}
	return a.outcome.String()
}

type armFigures struct {
	run *armRun
	fig figures
}

type report struct {
	o        options
	capacity float64
	arms     []armFigures
	wall     time.Duration
}

func (r *report) print(w io.Writer) {
	base := -1 // lost in the arm with moving off
	for _, a := range r.arms {
		if a.run.spec.maxMoves == 0 {
			base = a.fig.lost
			break
		}
	}
	fmt.Fprintln(w, "The calls in flight at the hang (started before it, not ended by it), by their attempt in flight then:")
	t := humanize.Table{Header: []string{"arm", "in flight at the hang", "answered right", "answered wrong", "lost",
		"lost vs moving off", "lost, then answered by a retry", "lost, never answered", "what the lost saw"}}
	for _, a := range r.arms {
		f := a.fig
		t.Add(a.run.spec.name, f.atHang, f.right, f.wrong, f.lost, ratio(f.lost, base), f.rescued, f.lost-f.rescued, countList(f.lostBy))
	}
	t.Print(w)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Every call of the run (latency: start of the call to its answer, retries included, delivered calls, engine seconds):")
	t = humanize.Table{Header: []string{"arm", "delivered / total", "delivered, text wrong", "p50 (s)", "p99 (s)",
		"started hang → verdict: delivered", "started in the recovery: delivered", "unfinished", "the limiter's RequestFate"}}
	for _, a := range r.arms {
		f := a.fig
		t.Add(a.run.spec.name, fmt.Sprintf("%d / %d (%s)", f.delivered, f.total, humanize.Pct(harness.Share(f.delivered, f.total))),
			f.deliveredWrong, secs(f.p50), secs(f.p99), groupShare(f, hangToVerdict), groupShare(f, inRecovery), f.unfinished,
			fateLine(a.run))
	}
	t.Print(w)
	fmt.Fprintln(w)
	r.printWindow(w)
	r.printVerdict(w)
	for _, a := range r.arms {
		run := a.run
		fmt.Fprintf(w, "%s (%s): at the hang (t=%s) the limiter had %d in flight and %d queued, the engine %d running and %d waiting; verdict t=%s, ready t=%s; ",
			run.spec.name, run.spec.what, secs(run.hangAt), run.limInFlight, run.limQueue, run.engRunning, run.engWaiting,
			secs(run.verdictAt), secs(run.readyAt))
		var gs []string
		for g := range groups {
			gr := a.fig.group[g]
			gs = append(gs, fmt.Sprintf("%s %d/%d (p50 %s s, p99 %s s)", groupNames[g], gr.delivered, gr.n,
				secs(harness.Percentile(gr.lat, 50)), secs(harness.Percentile(gr.lat, 99))))
		}
		fmt.Fprintf(w, "delivered by start: %s", strings.Join(gs, ", "))
		if run.peerStats != nil {
			fmt.Fprintf(w, "; the peer's own calls delivered %d/%d", run.peerDelivered, run.peerSent)
		}
		fmt.Fprintf(w, "; wall %s.\n", run.wall.Round(time.Second))
	}
	fmt.Fprintf(w, "\nWall time %s at scale %g.\n", r.wall.Round(time.Second), r.o.scale)
}

// printWindow is the hang window per arm: what the hang cost the calls
// that arrived after it, against the arm without suspicion of the same
// peering (the same run).
func (r *report) printWindow(w io.Writer) {
	fmt.Fprintf(w, "The hang window (clients retry %d times; latency of calls started after the hang against those ended before it, engine seconds):\n", r.o.retries)
	t := humanize.Table{Header: []string{"arm", "never answered (streams)", "vs suspicion off", "after the hang p50 / p99 (s)",
		"added p50 / p99 (s)", "p99 vs suspicion off", "hang → last call to the hung engine (s)", "suspicions (false)", "refused while held", "the peer's own calls never answered"}}
	for _, a := range r.arms {
		f, run := a.fig, a.run
		base := r.suspicionOff(run.spec)
		vsLost, vsP99 := "n/a", "n/a"
		if base != nil && base.run != run {
			vsLost = fmt.Sprintf("%d vs %d", f.neverAnswered, base.fig.neverAnswered)
			if base.fig.neverAnswered > 0 {
				vsLost = ratio(f.neverAnswered, base.fig.neverAnswered)
			}
			if base.fig.afterP99 > 0 {
				vsP99 = fmt.Sprintf("%.2fx", float64(f.afterP99)/float64(base.fig.afterP99))
			}
		}
		last, peerLost := run.lastAndPeerLost()
		t.Add(run.spec.name, fmt.Sprintf("%d (%d)", f.neverAnswered, f.streamsNever), vsLost,
			secs(f.afterP50)+" / "+secs(f.afterP99), secs(f.afterP50-f.beforeP50)+" / "+secs(f.afterP99-f.beforeP99), vsP99,
			last, fmt.Sprintf("%d (%d)", run.stats.Suspicions, run.stats.FalseSuspicions), countList64(run.stats.HeldRefused), peerLost)
	}
	t.Print(w)
	fmt.Fprintln(w)
}

// printVerdict is the calls in flight at the verdict per arm (issue
// #36's "Done when": with a peer none waits for the restart), against the
// arm without a peer (b) of the same run.
func (r *report) printVerdict(w io.Writer) {
	fmt.Fprintln(w, "The calls in flight at the verdict (started before it, not ended by it; engine seconds; in the no-hang arm the same moment):")
	t := humanize.Table{Header: []string{"arm", "never answered (all calls)", "in flight at the verdict", "of them never answered",
		"answered after the verdict p50 / p99 (s)", "p99 vs no peer (b)", "latency p50 / p99 (s)", "held for the restart (longest, s)",
		"hang → last call to the hung engine (s)", "suspicions (false)", "the peer's own never answered"}}
	var base *figures
	for i := range r.arms {
		if s := r.arms[i].run.spec; !s.peer && !s.noHang && !s.noSuspicion && s.maxMoves > 0 {
			base = &r.arms[i].fig
		}
	}
	for _, a := range r.arms {
		f, run := a.fig, a.run
		p99 := harness.Percentile(f.fromVerdict, 99)
		vs := "n/a"
		if b := harness.Percentile(base.fromVerdictOrNil(), 99); base != nil && b > 0 {
			vs = fmt.Sprintf("%.2fx", float64(p99)/float64(b))
		}
		last, peerLost := run.lastAndPeerLost()
		t.Add(run.spec.name, f.neverAnswered, f.atVerdict, f.verdictNever,
			secs(harness.Percentile(f.fromVerdict, 50))+" / "+secs(p99), vs,
			secs(harness.Percentile(f.verdictLat, 50))+" / "+secs(harness.Percentile(f.verdictLat, 99)),
			fmt.Sprintf("%d (%s)", run.fate.Held, secs(run.fate.HeldWaitMax)), last,
			fmt.Sprintf("%d (%d)", run.stats.Suspicions, run.stats.FalseSuspicions), peerLost)
	}
	t.Print(w)
	fmt.Fprintln(w)
}

func (f *figures) fromVerdictOrNil() []time.Duration {
	if f == nil {
		return nil
	}
	return f.fromVerdict
}

// suspicionOff is the arm with the stall suspicion off and the same
// peering and fault as spec (with moves on), or nil.
func (r *report) suspicionOff(spec armSpec) *armFigures {
	for i := range r.arms {
		if s := r.arms[i].run.spec; s.noSuspicion && s.maxMoves > 0 && s.peer == spec.peer && s.noHang == spec.noHang {
			return &r.arms[i]
		}
	}
	return nil
}

func countList64(m map[string]uint64) string {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = int(v)
	}
	return countList(c)
}

// ratio is lost against base, the arm with moving off ("n/a": no such
// arm, or it lost nothing).
func ratio(lost, base int) string {
	if base <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx", float64(lost)/float64(base))
}

func groupShare(f figures, g int) string {
	return fmt.Sprintf("%d / %d", f.group[g].delivered, f.group[g].n)
}

// fateLine is RequestFate in words.
func fateLine(r *armRun) string {
	f := r.fate
	var parts []string
	for _, p := range f.Peers() {
		parts = append(parts, fmt.Sprintf("moved %d to %s", f.MovedTo[p], p))
	}
	parts = append(parts, fmt.Sprintf("held %d", f.Held), fmt.Sprintf("continued %d", f.Continued))
	if n := f.LostTotal(); n > 0 {
		parts = append(parts, fmt.Sprintf("lost %d (%s)", n, countList(f.Lost)))
	} else {
		parts = append(parts, "lost 0")
	}
	if r.held > 0 {
		parts = append(parts, fmt.Sprintf("%d still held", r.held))
	}
	return strings.Join(parts, ", ")
}

// countList is "k n, k n" by count, most first; "-" for none.
func countList(m map[string]int) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	var out []string
	for _, k := range keys {
		if m[k] > 0 {
			out = append(out, fmt.Sprintf("%s: %d", k, m[k]))
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ", ")
}

// secs prints engine seconds to a tenth.
// lastAndPeerLost are two of an arm's cells: the hang to the last call
// the hung engine received, and the peer's own calls never answered.
func (run *armRun) lastAndPeerLost() (last, peerLost string) {
	last, peerLost = "none", "-"
	if run.lastToHung >= 0 {
		last = secs(run.lastToHung)
	}
	if run.peerStats != nil {
		peerLost = fmt.Sprintf("%d of %d", run.peerSent-run.peerDelivered, run.peerSent)
	}
	return last, peerLost
}

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) }
