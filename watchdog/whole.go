package watchdog

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/vigil-dev/vigil/probes"
)

// A scrape is read whole or not at all. Proxies cut bodies short at a
// line boundary, so a scrape can parse and still lack families the
// engine exports; read as-is, a missing counter compares as absent, a
// missing histogram line would read as a drop (an engine restart), and
// the next whole scrape as a rise (proof of serving). wholeScrapes
// therefore judges every readable scrape against the last whole one and
// turns the partial and the inconsistent ones into unreadable scrapes,
// which Classify never takes as evidence either way.

// acceptShapeAfter is how many consecutive scrapes must agree on a new
// shape (families gone for good, or counters down on an engine that did
// restart but not all at once) before it is believed.
const acceptShapeAfter = 3

// wholeScrapes returns history with partial and inconsistent scrapes made
// unreadable; history itself is not changed (samples are copied only
// when one is).
func wholeScrapes(history []Sample) []Sample {
	var (
		out    []Sample
		ref    *probes.Metrics
		streak int    // consecutive scrapes rejected for the same fault
		fault  string // the fault of that streak
	)
	for i := range history {
		s := &history[i]
		if !s.readable() {
			continue
		}
		m := s.Metrics.Metrics
		if ref == nil {
			ref = m
			continue
		}
		why, shape := judgeScrape(ref, m)
		if why == "" {
			ref, streak, fault = m, 0, ""
			continue
		}
		if shape == fault {
			streak++
		} else {
			streak, fault = 1, shape
		}
		if streak >= acceptShapeAfter {
			ref, streak, fault = m, 0, ""
			continue
		}
		if out == nil {
			out = slices.Clone(history)
		}
		o := &out[i].Metrics
		o.Metrics = nil
		o.Class = probes.ClassOther
		o.Error = why
	}
	if out == nil {
		return history
	}
	return out
}

// judgeScrape compares a readable scrape with the last whole one. why is
// "" when it is whole and consistent; shape names the fault the same way
// from one scrape to the next, so a lasting change can be accepted.
func judgeScrape(ref, m *probes.Metrics) (why, shape string) {
	var gone []string
	for _, set := range []struct{ ref, m map[string]float64 }{
		{ref.Progress, m.Progress}, {ref.Heartbeats, m.Heartbeats}, {ref.Extra, m.Extra},
	} {
		for name := range set.ref {
			if _, ok := set.m[name]; !ok && !slices.Contains(gone, name) {
				gone = append(gone, name)
			}
		}
	}
	if ref.Decode != nil && m.Decode == nil {
		gone = append(gone, "the decode counters")
	}
	for id := range ref.Ranks {
		if m.Ranks == nil || m.Ranks[id] == nil {
			gone = append(gone, "rank "+id)
		}
	}
	if len(gone) > 0 {
		sort.Strings(gone)
		list := strings.Join(gone, ", ")
		return fmt.Sprintf("partial scrape: %s missing, present in the scrape before (a body cut short?)", list), "missing " + list
	}
	down, kept := resetSplit(ref, m)
	if len(down) == 0 {
		return "", ""
	}
	switch restarted(ref, m) {
	case startChanged:
		return "", ""
	case startSame:
		return fmt.Sprintf("inconsistent scrape: %s went down but the engine's start time did not change (not an engine restart)",
			strings.Join(down, ", ")), "inconsistent"
	}
	if len(kept) > 0 {
		return fmt.Sprintf("inconsistent scrape: %s went down while %s did not (not an engine restart)",
			strings.Join(down, ", "), strings.Join(kept, ", ")), "inconsistent"
	}
	return "", ""
}

// resetSplit lists the counters (progress and heartbeats) that went down
// from ref to m, and those that had counted something and did not: an
// engine restart takes every one of them back toward zero at once.
func resetSplit(ref, m *probes.Metrics) (down, kept []string) {
	for _, set := range []struct{ ref, m map[string]float64 }{
		{ref.Progress, m.Progress}, {ref.Heartbeats, m.Heartbeats},
	} {
		for name, a := range set.ref {
			b, ok := set.m[name]
			switch {
			case !ok:
			case b < a:
				down = append(down, name)
			case a > 0:
				kept = append(kept, name)
			}
		}
	}
	sort.Strings(down)
	sort.Strings(kept)
	return down, kept
}

type startTime int

const (
	startUnknown startTime = iota // not exposed by both scrapes
	startSame
	startChanged
)

// restarted compares the engine's start time, where both scrapes expose it.
func restarted(ref, m *probes.Metrics) startTime {
	a, ok1 := ref.Extra[probes.MetricProcessStart]
	b, ok2 := m.Extra[probes.MetricProcessStart]
	switch {
	case !ok1 || !ok2:
		return startUnknown
	case a != b:
		return startChanged
	}
	return startSame
}
