package main

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/util/humanize"
	"github.com/vigil-dev/vigil/watchdog"
)

type workloadResult struct {
	name     string
	capacity float64
	arms     []armResult
	long     *longResult
}

// armResult is one arm's hangs, with auto and with the old defaults.
type armResult struct {
	arm
	auto, fixed []hangResult
}

type report struct {
	scale           float64
	workloads       []workloadResult
	battery         []batteryResult
	batteryWorkload string
	wall            time.Duration
}

func (r *report) print(w io.Writer) {
	r.printDetection(w)
	r.printFalseHangs(w)
	r.printBattery(w)
	fmt.Fprintf(w, "\nWall time %s at scale %g.\n", r.wall.Round(time.Second), r.scale)
}

func (r *report) printDetection(w io.Writer) {
	t := humanize.Table{Header: []string{"workload", "arm", "hang_after", "detected after, each hang (s)", "median (s)", "max (s)",
		"window at the verdict (s)", "median auto / old", "target: every hang within"}}
	shown := false
	for _, wr := range r.workloads {
		for _, ar := range wr.arms {
			if len(ar.auto) == 0 {
				continue
			}
			shown = true
			ma, mf := medianTook(ar.auto), medianTook(ar.fixed)
			ratio := "n/a"
			if ma > 0 && mf > 0 {
				ratio = fmt.Sprintf("%.2fx", ma.Seconds()/mf.Seconds())
			}
			t.Add(wr.name, ar.name, "auto", tookList(ar.auto), secs(ma), secs(maxTook(ar.auto)), windowList(ar.auto), ratio, verdictBar(ar.auto, ar.target))
			t.Add(wr.name, ar.name, humanize.Duration(fixedWindow)+", "+humanize.Duration(oldInterval)+" cycle", tookList(ar.fixed), secs(mf), secs(maxTook(ar.fixed)), windowList(ar.fixed), "", "")
		}
	}
	if !shown {
		return
	}
	fmt.Fprintln(w, "Detection of a hang (Engine.Hang() after the warm-up; \"-\": not HUNG within the ceiling + 4 intervals):")
	t.Print(w)
	for _, wr := range r.workloads {
		for _, ar := range wr.arms {
			for i, h := range ar.auto {
				fmt.Fprintf(w, "%s %s auto rep %d: HUNG by %s; before the hang %s; stalled at the cycles in between (s): %s",
					wr.name, ar.name, i+1, orDash(h.why), orDash(h.beforeWhy), stallList(h.stalled))
				if n := h.falseBefore + falseBefore(ar.fixed, i); n > 0 {
					fmt.Fprintf(w, "; %d HUNG verdicts before the hang", n)
				}
				fmt.Fprintf(w, "; before the hang the longest stall timed %s s of a %s s window, the engine's longest pause between steps with work %s s",
					secs(h.closest), secs(h.closestWindow), secs(h.pause))
				fmt.Fprintln(w)
			}
		}
	}
	fmt.Fprintln(w)
}

func (r *report) printBattery(w io.Writer) {
	if len(r.battery) == 0 {
		return
	}
	t := humanize.Table{Header: []string{"false-hang battery (" + r.batteryWorkload + " calls)", "verdicts", "HUNG", "recoveries asked", "longest window (s)", "states"}}
	hung := 0
	for _, b := range r.battery {
		hung += b.hung
		t.Add(b.name, b.verdicts, b.hung, b.recoveries, secs(b.longest.d), stateList(b.states))
	}
	fmt.Fprintf(w, "\nFalse-hang battery with the defaults (hang_after: auto), each on a fresh rig, no fault: %d HUNG in all.\n", hung)
	t.Print(w)
	for _, b := range r.battery {
		fmt.Fprintf(w, "%s: longest window: %s\n", b.name, orDash(b.longest.why))
		for _, why := range b.hungWhy {
			fmt.Fprintf(w, "%s: HUNG %s\n", b.name, why)
		}
	}
}

func falseBefore(hs []hangResult, i int) int {
	if i < len(hs) {
		return hs[i].falseBefore
	}
	return 0
}

func (r *report) printFalseHangs(w io.Writer) {
	t := humanize.Table{Header: []string{"workload", "engine time", "verdicts", "HUNG", "recoveries asked", "window min / median / max (s)",
		"at the ceiling", "states", "served (x C)", "calls sent / answered"}}
	shown := false
	for _, wr := range r.workloads {
		l := wr.long
		if l == nil {
			continue
		}
		shown = true
		lo, med, hi := windowStats(l.windows)
		t.Add(wr.name, humanize.Duration(l.duration), l.verdicts, l.hung, l.recoveries,
			fmt.Sprintf("%s / %s / %s", secs(lo.d), secs(med.d), secs(hi.d)), fmt.Sprintf("%d of %d", l.ceilingAfter, len(l.windows)),
			stateList(l.states),
			fmt.Sprintf("%.2f", l.served), fmt.Sprintf("%d / %d", l.sent, l.answered))
	}
	if !shown {
		return
	}
	fmt.Fprintln(w, "False hangs with hang_after: auto, no fault (window figures exclude the warm-up):")
	t.Print(w)
	for _, wr := range r.workloads {
		if l := wr.long; l != nil {
			_, med, hi := windowStats(l.windows)
			fmt.Fprintf(w, "%s: at the median: %s; at the max: %s; warm-up: %d of %d verdicts at the ceiling; limiter at the end: %s\n",
				wr.name, orDash(med.why), orDash(hi.why), l.atCeiling, l.warmupVerdicts, l.limiter)
			for _, why := range l.hungWhy {
				fmt.Fprintf(w, "%s: HUNG %s\n", wr.name, why)
			}
			fmt.Fprintf(w, "%s: every endpoint timing out while the limiter heard the engine: %d verdicts, %d of them past hang_after and not hung for it\n",
				wr.name, l.wedgeHeard, l.wedgeVetoed)
		}
	}
}

func medianTook(hs []hangResult) time.Duration {
	var ds []time.Duration
	for _, h := range hs {
		if !h.detected {
			return 0 // a miss has no time to rank
		}
		ds = append(ds, h.took)
	}
	return median(ds)
}

func maxTook(hs []hangResult) time.Duration {
	var m time.Duration
	for _, h := range hs {
		if !h.detected {
			return 0
		}
		m = max(m, h.took)
	}
	return m
}

func tookList(hs []hangResult) string {
	var s []string
	for _, h := range hs {
		if h.detected {
			s = append(s, secs(h.took))
		} else {
			s = append(s, "-")
		}
	}
	return strings.Join(s, ", ")
}

func windowList(hs []hangResult) string {
	var s []string
	for _, h := range hs {
		if h.detected {
			s = append(s, secs(h.window))
		} else {
			s = append(s, "-")
		}
	}
	return strings.Join(s, ", ")
}

// verdictBar says whether every hang was HUNG within the arm's target
// (issue 37's, engine time).
func verdictBar(hs []hangResult, target time.Duration) string {
	if len(hs) == 0 {
		return ""
	}
	for _, h := range hs {
		if !h.detected || h.took > target {
			return humanize.Duration(target) + ": NOT MET"
		}
	}
	return humanize.Duration(target) + ": MET"
}

func stateList(m map[watchdog.State]int) string {
	var keys []string
	for s := range m {
		keys = append(keys, string(s))
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s %d", k, m[watchdog.State(k)]))
	}
	return strings.Join(out, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func stallList(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	var s []string
	for _, d := range ds {
		s = append(s, ms(d))
	}
	return strings.Join(s, ", ")
}

// ms prints engine seconds to the millisecond: a stall that missed the
// window by a tick of scheduling jitter must show it.
func ms(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) }

// secs prints engine seconds to a tenth.
func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) }

// median is the lower median (a member of xs: its why string exists); 0
// for none.
func median(xs []time.Duration) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// windowStats is the smallest, the (lower) median and the largest window.
func windowStats(ws []windowSeen) (lo, med, hi windowSeen) {
	if len(ws) == 0 {
		return
	}
	s := slices.Clone(ws)
	slices.SortStableFunc(s, func(a, b windowSeen) int { return int(a.d - b.d) })
	return s[0], s[(len(s)-1)/2], s[len(s)-1]
}

// The watchdog writes its why strings in its own (wall) time: at scale
// 25 a 15 s floor reads "600ms" and a prefill rate 25 times too fast.
// engineWhy rewrites the durations and the token rates in one into
// engine time, so the report reads as it would beside a real engine.
var (
	whyDuration = regexp.MustCompile(`\b\d+h\d\dm|\b\d+m\d\ds|\b\d+ms|\b\d+(?:\.\d+)?s\b`)
	whyRate     = regexp.MustCompile(`\b(\d[\d,]*(?:\.\d+)?) tok/s`)
)

func engineWhy(why string, scale float64) string {
	why = whyRate.ReplaceAllStringFunc(why, func(m string) string {
		v, err := strconv.ParseFloat(strings.ReplaceAll(whyRate.FindStringSubmatch(m)[1], ",", ""), 64)
		if err != nil {
			return m
		}
		return humanize.Count(v/scale) + " tok/s"
	})
	return whyDuration.ReplaceAllStringFunc(why, func(m string) string {
		d, err := time.ParseDuration(m)
		if err != nil {
			return m
		}
		return humanize.Duration(time.Duration(float64(d) * scale))
	})
}
