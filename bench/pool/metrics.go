package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/util/humanize"
)

// figures are one arm's columns.
type figures struct {
	harness.PaperFigures
	nodes int
	// holdCreated / holdCompleted: executions the engines received /
	// completed during the hold, per second, as multiples of the pool's
	// capacity (nodes x C).
	holdCreated, holdCompleted float64
	// busiestCreated: the busiest node's executions created during the
	// hold per second, as a multiple of its own C (key hashing need not
	// split the keys evenly).
	busiestCreated float64
	// retries: attempts the limiters counted as retries, over the run;
	// answered: those of them answered from their call's execution
	// (attached to it running, or given its stored result).
	retries, answered uint64
	// keyedRetries / keyedFound: the limiters' keyed retries that had an
	// execution to find and found it, the share vigil's /status and
	// diagnose report per node.
	keyedRetries, keyedFound uint64
	// serverDowns counts HAProxy servers marked DOWN by a failed health
	// check during the arm (0 for the direct arm).
	serverDowns int
}

// attachedShare is the share of the limiters' retries answered by their
// call's execution.
func (f figures) attachedShare() float64 { return ratio(f.answered, f.retries) }

// foundShare is the pool-affinity share (/status): keyed retries that
// found their execution, of those that had one to find.
func (f figures) foundShare() float64 { return ratio(f.keyedFound, f.keyedRetries) }

func ratio(n, of uint64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

func measure(r armResult, c float64, hold time.Duration) figures {
	f := figures{PaperFigures: harness.MeasurePaper(r.calls, r.phase), nodes: r.nodes}
	perC := hold.Seconds() * c
	var created, completed uint64
	for i := range r.hold1.engines {
		d := r.hold1.engines[i].Received - r.hold0.engines[i].Received
		created += d
		completed += r.hold1.engines[i].Completed - r.hold0.engines[i].Completed
		f.busiestCreated = max(f.busiestCreated, float64(d)/perC)
	}
	f.holdCreated = float64(created) / perC / float64(max(1, r.nodes))
	f.holdCompleted = float64(completed) / perC / float64(max(1, r.nodes))
	for _, s := range r.end.limiters {
		f.retries += s.Retries
		f.answered += s.CoalescedAttached + s.CoalescedStored
		f.keyedRetries += s.KeyedRetries
		f.keyedFound += s.KeyedRetriesFound
	}
	for _, s := range r.servers {
		var n int
		fmt.Sscan(s["chkdown"], &n)
		f.serverDowns += n
	}
	return f
}

var header = []string{"arm", "nodes", "hold delivered", "hold within 1st deadline", "hold executions created (x pool C)",
	"busiest node created (x C)", "hold executions completed (x pool C)", "retries attached (of limiter retries)",
	"keyed retries found (/status)", "pulse delivered", "attempts/call", "wall"}

func row(f figures) []any {
	return []any{f.nodes, humanize.Pct(f.HoldDelivered), humanize.Pct(f.HoldOnTime), fmt.Sprintf("%.2f", f.holdCreated),
		fmt.Sprintf("%.2f", f.busiestCreated), fmt.Sprintf("%.2f", f.holdCompleted),
		fmt.Sprintf("%s (%d/%d)", humanize.Pct(f.attachedShare()), f.answered, f.retries),
		fmt.Sprintf("%s (%d/%d)", humanize.Pct(f.foundShare()), f.keyedFound, f.keyedRetries),
		humanize.Pct(f.PulseDelivered), fmt.Sprintf("%.2f", f.Attempts)}
}

// ratioRow is pool figures over the single node's, column by column.
func ratioRow(p, s figures) []any {
	x := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.3fx", a/b)
	}
	return []any{"", x(p.HoldDelivered, s.HoldDelivered), x(p.HoldOnTime, s.HoldOnTime), x(p.holdCreated, s.holdCreated),
		x(p.busiestCreated, s.busiestCreated), x(p.holdCompleted, s.holdCompleted), x(p.attachedShare(), s.attachedShare()),
		x(p.foundShare(), s.foundShare()), x(p.PulseDelivered, s.PulseDelivered), x(p.Attempts, s.Attempts)}
}

func printResults(w io.Writer, rs []armResult, c float64) {
	t := humanize.Table{Header: header}
	var single *armResult
	for i, r := range rs {
		if r.arm.routing == direct {
			single = &rs[i]
		}
		t.Add(append(append([]any{r.arm.name + " (" + r.arm.what + ")"}, row(r.f)...), r.wall.Round(time.Second))...)
	}
	if single != nil {
		for _, r := range rs {
			if r.arm.routing != direct {
				t.Add(append(append([]any{"*" + r.arm.name + " / single*"}, ratioRow(r.f, single.f)...), "")...)
			}
		}
	}
	t.Add("target for key-affine", "", "single's", "single's", "single's", "", "", "single's", "single's", "", "", "")
	fmt.Fprintln(w)
	t.Print(w)
	fmt.Fprintf(w, "\nC = %.3f calls/s per node (engine time).\n", c)
	for _, r := range rs {
		fmt.Fprintf(w, "%s: %d pulse calls, %d hold calls, %d client retries; HAProxy servers marked down: %d\n",
			r.arm.name, r.f.PulseCalls, r.f.HoldCalls, r.f.Retries, r.f.serverDowns)
		for i, s := range r.end.limiters {
			hold := r.hold1.engines[i].Received - r.hold0.engines[i].Received
			fmt.Fprintf(w, "  %s: engine executions %d (hold %d); limiter calls=%d executions=%d retries=%d attached=%d stored=%d keyed_retries=%d found=%d rejected=%v\n",
				nodeName(i), r.end.engines[i].Received, hold, s.Calls, s.Executions, s.Retries, s.CoalescedAttached,
				s.CoalescedStored, s.KeyedRetries, s.KeyedRetriesFound, nonZero(s.Rejected))
		}
		for _, name := range slices.Sorted(maps.Keys(r.servers)) {
			s := r.servers[name]
			fmt.Fprintf(w, "  haproxy %s: status=%s sessions=%s chkfail=%s chkdown=%s downtime=%ss\n",
				name, s["status"], s["stot"], s["chkfail"], s["chkdown"], s["downtime"])
		}
	}
}

func nonZero(m map[string]uint64) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] > 0 {
			out = append(out, fmt.Sprintf("%s=%d", k, m[k]))
		}
	}
	return "{" + strings.Join(out, " ") + "}"
}
