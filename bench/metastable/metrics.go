package main

import (
	"fmt"
	"io"
	"time"

	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/util/humanize"
)

// metrics are one arm's columns.
type metrics struct {
	pulseCalls, holdCalls int
	// Shares of calls delivered within deliveredWithin of their start.
	pulseDelivered, holdDelivered float64
	// Shares delivered after their first attempt's deadline (late).
	pulseLate float64
	// holdOnTime: hold calls delivered within their first attempt's
	// deadline (120 s after the call started).
	holdOnTime float64
	// Executions the engine received / completed during the hold, per
	// second, as multiples of C.
	holdCreated, holdCompleted float64
	// attempts per call, over every call of the run.
	attempts float64
}

func measure(r armResult, c float64) metrics {
	f := harness.MeasurePaper(r.calls, r.phase)
	m := metrics{pulseCalls: f.PulseCalls, holdCalls: f.HoldCalls, pulseDelivered: f.PulseDelivered,
		holdDelivered: f.HoldDelivered, pulseLate: f.PulseLate, holdOnTime: f.HoldOnTime, attempts: f.Attempts}
	perC := holdFor.Seconds() * c
	m.holdCreated = float64(r.hold1.Received-r.hold0.Received) / perC
	m.holdCompleted = float64(r.hold1.Completed-r.hold0.Completed) / perC
	return m
}

func printResults(w io.Writer, rs []armResult, c float64) {
	t := humanize.Table{Header: []string{"arm", "pulse delivered", "pulse late", "hold delivered",
		"hold within 1st deadline", "hold executions created (xC)", "hold executions completed (xC)", "attempts/call", "wall"}}
	for _, r := range rs {
		m := r.m
		t.Add(r.arm.name+" ("+r.arm.what+")", humanize.Pct(m.pulseDelivered), humanize.Pct(m.pulseLate),
			humanize.Pct(m.holdDelivered), humanize.Pct(m.holdOnTime),
			fmt.Sprintf("%.2f", m.holdCreated), fmt.Sprintf("%.2f", m.holdCompleted),
			fmt.Sprintf("%.2f", m.attempts), r.wall.Round(time.Second))
	}
	t.Add("published: no control", "", "", "0%", "", "", "", "", "")
	t.Add("published: best control (coalescing, cancel deferred 10 s)", "100%", "nearly half", "100%", "", "", "", "", "")
	t.Add("target for vigil", "100%", "", "100%", ">= 99%", "< 1.00", "", "", "")
	fmt.Fprintln(w)
	t.Print(w)
	if len(rs) > 0 {
		fmt.Fprintf(w, "\n%d pulse calls and %d hold calls per arm (same arrivals and workload in every arm); C = %.3f calls/s.\n",
			rs[0].m.pulseCalls, rs[0].m.holdCalls, c)
	}
	for _, r := range rs {
		if r.limiter != "" {
			fmt.Fprintf(w, "%s limiter counters: %s\n", r.arm.name, r.limiter)
		}
	}
}
