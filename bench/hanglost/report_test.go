package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/admission"
	"github.com/vigil-dev/vigil/internal/testinfra"
)

func TestMeasureSortsTheCallsInFlightAtTheHang(t *testing.T) {
	s := time.Second
	calls := []call{{kind: unaryCompletion}, {kind: streamChat}, {kind: streamCompletion}, {kind: unaryChat}, {kind: streamChat}, {kind: unaryChat}}
	want := []string{" a", " b", " c", " d", " e", " f"}
	ok := func(start, end time.Duration, text string, ids ...string) attempt {
		a := attempt{start: start, end: end, outcome: okAnswer, text: text, ids: map[string]bool{}, dones: 1}
		for _, id := range ids {
			a.ids[id] = true
		}
		return a
	}
	r := &armRun{hangAt: 10 * s, verdictAt: 20 * s, readyAt: 30 * s, results: []result{
		// Ended before the hang.
		{start: 1 * s, end: 5 * s, attempts: []attempt{ok(1*s, 5*s, " a")}},
		// In flight at the hang: a continued stream, right.
		{start: 8 * s, end: 40 * s, attempts: []attempt{ok(8*s, 40*s, " b", "x")}},
		// In flight: a stream spliced under two ids (wrong).
		{start: 9 * s, end: 40 * s, attempts: []attempt{ok(9*s, 40*s, " c", "x", "y")}},
		// In flight: a 502, then a retry answered right.
		{start: 9 * s, end: 45 * s, attempts: []attempt{{start: 9 * s, end: 21 * s, outcome: httpError, status: 502, code: "upstream_error"},
			ok(22*s, 45*s, " d")}},
		// In flight: a stream broken off (lost, never answered).
		{start: 9 * s, end: 21 * s, attempts: []attempt{{start: 9 * s, end: 21 * s, outcome: reset, text: " e"}}},
		// During the recovery, answered after it.
		{start: 25 * s, end: 50 * s, attempts: []attempt{ok(25*s, 50*s, " f")}},
	}}
	f := measure(r, calls, want)
	if f.atHang != 4 || f.right != 1 || f.wrong != 1 || f.lost != 2 || f.rescued != 1 {
		t.Errorf("at the hang %d, right %d, wrong %d, lost %d, rescued %d; want 4, 1, 1, 2, 1", f.atHang, f.right, f.wrong, f.lost, f.rescued)
	}
	if f.lostBy["502 upstream_error"] != 1 || f.lostBy["reset"] != 1 {
		t.Errorf("lost by %v", f.lostBy)
	}
	if f.total != 6 || f.delivered != 5 || f.deliveredWrong != 1 || f.group[inRecovery].delivered != 1 {
		t.Errorf("total %d, delivered %d, wrong %d, groups %v", f.total, f.delivered, f.deliveredWrong, f.group)
	}
	if f.p50 != 31*s {
		t.Errorf("p50 %v, want 31s (of 4, 25, 31, 32, 36 s)", f.p50)
	}
	// In flight at the verdict (t=20): the three answered at 40 and 45 s,
	// and the stream broken off at 21 s.
	if f.atVerdict != 4 || f.verdictNever != 1 || !slices.Equal(f.fromVerdict, []time.Duration{20 * s, 20 * s, 25 * s}) {
		t.Errorf("at the verdict %d, never answered %d, answered after it %v; want 4, 1, [20s 20s 25s]", f.atVerdict, f.verdictNever, f.fromVerdict)
	}
}

func TestReportPrintsTheRatioAgainstMovingOff(t *testing.T) {
	arm := func(spec armSpec, lost int) armFigures {
		return armFigures{run: &armRun{spec: spec, fate: admission.Fate{Held: 3}}, fig: figures{atHang: 40, lost: lost, lostBy: map[string]int{"reset": lost}}}
	}
	rep := &report{o: options{scale: 6}, arms: []armFigures{arm(armSpecs[0], 32), arm(armSpecs[1], 0), arm(armSpecs[2], 8)}}
	var buf bytes.Buffer
	rep.print(&buf)
	for _, want := range []string{" 1.00x |", " 0.00x |", " 0.25x |", "reset: 32", "held 3, continued 0, lost 0"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("missing %q in:\n%s", want, buf.String())
		}
	}
}

// The hang window's table compares each arm with the arm of the same
// peering whose suspicion is off, and says what the peer's own clients
// lost.
func TestTheHangWindowTableComparesWithSuspicionOff(t *testing.T) {
	s := time.Second
	arm := func(spec armSpec, never, after99 int, last time.Duration, peerSent, peerDelivered int) armFigures {
		r := &armRun{spec: spec, lastToHung: last, peerSent: peerSent, peerDelivered: peerDelivered,
			stats: admission.Stats{Suspicions: 2, FalseSuspicions: 1, HeldRefused: map[string]uint64{"queue_full": 3}}}
		if spec.peer {
			r.peerStats = &admission.Stats{}
		}
		return armFigures{run: r, fig: figures{neverAnswered: never, afterP99: time.Duration(after99) * s}}
	}
	rep := &report{o: options{scale: 6}, arms: []armFigures{
		arm(armSpecs[1], 0, 10, s/2, 0, 0),     // b: no peer
		arm(armSpecs[2], 2, 20, s/2, 100, 100), // c: a peer
		arm(armSpecs[3], 4, 40, 4*s, 100, 90),  // d: a peer, suspicion off
		arm(armSpecs[4], 0, 20, 5*s, 0, 0),     // e: no peer, suspicion off
	}}
	var buf bytes.Buffer
	rep.printWindow(&buf)
	rows := map[string]string{}
	for _, line := range strings.Split(buf.String(), "\n") {
		for _, a := range rep.arms {
			if strings.HasPrefix(line, "| "+a.run.spec.name+" ") {
				rows[a.run.spec.name] = strings.Join(strings.Fields(line), " ") // cells unpadded
			}
		}
	}
	for name, want := range map[string][]string{
		armSpecs[1].name: {"| 0 vs 0 |", "| 0.50x |", "| 0.5 |", "| 2 (1) |", "queue_full: 3", "| - |"},
		armSpecs[2].name: {"| 0.50x |", "| 0.50x |", "| 0 of 100 |"},
		armSpecs[3].name: {"| n/a |", "| 4.0 |", "| 10 of 100 |"},
		armSpecs[4].name: {"| n/a |", "| 5.0 |"},
	} {
		for _, w := range want {
			if !strings.Contains(rows[name], w) {
				t.Errorf("%s: row lacks %q:\n%s", name, w, rows[name])
			}
		}
	}
}

func TestCallsAreSizedAndTheirUnaryTwinIsTheSameRequest(t *testing.T) {
	calls := draw(1, "Node", 10, 20*time.Second)
	if len(calls) < 100 {
		t.Fatalf("%d calls in 20 s at 10/s", len(calls))
	}
	seen := map[kind]bool{}
	for _, c := range calls {
		seen[c.kind] = true
		var b map[string]any
		if err := json.Unmarshal(c.body, &b); err != nil {
			t.Fatal(err)
		}
		if (b["stream"] == true) != c.kind.stream() || int(b["max_tokens"].(float64)) != c.answer {
			t.Errorf("%s: body %s", c.kind, c.body)
		}
		text, _ := b["prompt"].(string)
		if msgs, ok := b["messages"].([]any); ok {
			text = msgs[0].(map[string]any)["content"].(string)
		}
		if n := len(text) / 4; n < promptMean-promptSpread || n > promptMean+promptSpread {
			t.Errorf("%s: prompt of %d characters", c.kind, len(text))
		}
		var u map[string]any
		if err := json.Unmarshal(unaryOf(c), &u); err != nil || u["stream"] != nil || len(u) != len(b)-boolToInt(c.kind.stream()) {
			t.Errorf("unary twin of %s: %v", c.body[:40], u)
		}
	}
	if len(seen) != int(kinds) {
		t.Errorf("kinds drawn: %v", seen)
	}
}

func TestLongPromptsAreSpreadInOrder(t *testing.T) {
	calls := withLongPrompts(draw(1, "Node", 10, 20*time.Second), 3, 30000, 20*time.Second)
	long := 0
	for i, c := range calls {
		if i > 0 && c.at < calls[i-1].at {
			t.Fatalf("call %d at %v before call %d at %v", i, c.at, i-1, calls[i-1].at)
		}
		var b map[string]any
		if err := json.Unmarshal(c.body, &b); err != nil {
			t.Fatal(err)
		}
		if p, _ := b["prompt"].(string); len(p) >= 4*30000 {
			long++
			if !c.kind.stream() || c.at != time.Duration(long)*5*time.Second {
				t.Errorf("long call %d: %s at %v, want streamed at %v", long, c.kind, c.at, time.Duration(long)*5*time.Second)
			}
		}
	}
	if long != 3 {
		t.Errorf("%d long prompts, want 3", long)
	}
}

func boolToInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A short run of every arm: the moves must lose nothing and every answer
// must be the uninterrupted text (issue 24); moving off loses the calls
// in the engine. The clients do not retry (issue 36: behind HAProxy a 503
// reaches a person), so with moves on, peer or none, suspicion on or
// off, every call of the run must be answered. Five time-scaled hangs,
// about 40 s: a load test.
func TestArmsEndToEnd(t *testing.T) {
	testinfra.Long(t, "runs three simulated hangs (about 25 s)")
	testinfra.Alone(t)
	o := options{scale: 10, seqs: 16, load: 1, peerLoad: 0.5, warmup: 10 * time.Second, detect: 5 * time.Second,
		restart: 10 * time.Second, tail: 5 * time.Second, drain: 2 * time.Minute, seed: 7, retries: 0}
	c := 5.0 // about a 16-seat engine's capacity; the figure does not matter here
	calls := draw(o.seed, "Node", o.load*c, o.length())
	want, err := expectedTexts(context.Background(), calls)
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range armSpecs {
		r, err := runArm(context.Background(), o, spec, calls, draw(o.seed+1, "Peer", o.peerLoad*c, o.length()))
		if err != nil {
			t.Fatal(err)
		}
		f := measure(r, calls, want)
		t.Logf("%s: at the hang %d, right %d, lost %d %v; delivered %d/%d; fate %+v", spec.name, f.atHang, f.right, f.lost,
			f.lostBy, f.delivered, f.total, r.fate)
		if f.atHang == 0 || f.wrong != 0 || f.deliveredWrong != 0 {
			t.Errorf("%s: %d at the hang, %d answered wrong, %d delivered wrong", spec.name, f.atHang, f.wrong, f.deliveredWrong)
		}
		if spec.maxMoves > 0 && f.lost != 0 {
			t.Errorf("%s: %d calls in flight at the hang lost (%v)", spec.name, f.lost, f.lostBy)
		}
		if spec.maxMoves > 0 && f.neverAnswered != 0 {
			t.Errorf("%s: %d of %d calls never answered (%d streams), %v refused while held; want none",
				spec.name, f.neverAnswered, f.total, f.streamsNever, r.stats.HeldRefused)
		}
		if spec.noHang && (len(r.stats.HeldRefused) != 0 || r.stats.Rejected["stream_deadline"] != 0) {
			t.Errorf("%s: refused %v while held, %d stream deadlines, with no hang (%d suspicions, %d false)", spec.name,
				r.stats.HeldRefused, r.stats.Rejected["stream_deadline"], r.stats.Suspicions, r.stats.FalseSuspicions)
		}
		if spec.maxMoves == 0 && f.lost == 0 {
			t.Errorf("%s: nothing lost with moving off", spec.name)
		}
	}
}
