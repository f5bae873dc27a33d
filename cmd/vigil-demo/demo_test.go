package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

// The demo is the README's first command: it must tell the whole story,
// in order, in under a minute, run by the daemon `vigil run` runs, and
// show the limiter keep the overload shallow beside the run without it.
func TestDemoTellsTheStoryInUnderAMinute(t *testing.T) {
	testinfra.Long(t, "the demo takes ~45s")
	// Its minute is a person's, on a machine of their own: timed beside the
	// race-enabled suite it measures the suite (60.3s there, 48s alone).
	testinfra.Alone(t)
	start := time.Now()
	code, out, errOut := vigilDemo(t, "-v")
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("demo exited %d: %s\n%s", code, errOut, out)
	}
	if took > 60*time.Second {
		t.Errorf("demo took %s, want under 60s", took)
	}

	// The daemon's own parts ran: its start line with the config's load
	// balancer, restarter and limiter (daemon.run), its first-cycle line
	// (daemon.onCycle), the limiter and recovery logging under their part
	// names, and its /status answered at the end.
	for _, want := range []string{
		`msg="vigil starting"`, "load_balancer=haproxy", "restart=docker", `limiter="on `,
		`msg="first sample taken; ready"`, "part=recovery",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("vigil's log lacks %q: the demo did not run the daemon's parts", want)
		}
	}
	// The calls in flight on the hung engine were held for the restarted
	// one, none lost.
	if !regexp.MustCompile(`The calls in flight on the hung engine: [1-9]\d* held and sent to the restarted engine \(\d+ of them streams\s+continued where they stopped\), 0 moved to a peer, 0 lost`).MatchString(out) {
		t.Errorf("the demo does not say the calls in flight on the hung engine were held, none lost:\n%s", out)
	}
	if !regexp.MustCompile(`vigil's /status at the end: HEALTHY, 1 restart; limiter [1-9]\d* attempts seen`).MatchString(out) {
		t.Errorf("the demo did not read the daemon's /status:\n%s", out)
	}

	// Each beat of the story, in order.
	beats := []string{
		"vigil is built as `vigil run` builds it",
		"vigil: HEALTHY",
		"▶ overload through vigil's limiter",
		"limiter: ",
		"▶ the same overload straight at the engine",
		"vigil: SATURATED",
		"a collective hang under load",
		"load balancer: node1 → DRAIN",
		"restart: stopping the hung engine",
		"vigil: LOADING",
		"load balancer: node1 weight 10%",
		"load balancer: node1 weight 100%",
		"RESOLVED on node1",
		"Summary: the overload was SATURATED and vigil never restarted it",
		"(1 restart,",
		"with and without vigil's limiter",
	}
	at := 0
	for _, b := range beats {
		i := strings.Index(out[at:], b)
		if i < 0 {
			t.Fatalf("the demo lacks %q after offset %d:\n%s", b, at, out)
		}
		at += i
	}
	// Nothing was restarted before the hang, and the saturation was paged.
	// (A page and the narration of the same verdict may print in either
	// order: the pager sends from its own goroutine.)
	hang := strings.Index(out, "a collective hang under load")
	if !strings.Contains(out[:hang], "PAGE ▶ :large_orange_circle: SATURATED") {
		t.Fatalf("the saturation was not paged before the hang:\n%s", out[:hang])
	}
	if !strings.Contains(out[:hang], "NEVER restart") {
		t.Fatalf("the saturation was not narrated as never restarted:\n%s", out[:hang])
	}
	// The narration of HUNG and the drain it triggers happen at the same
	// moment from different goroutines: either may print first.
	if !strings.Contains(out[hang:], "vigil: HUNG") {
		t.Fatalf("the hang was never called HUNG:\n%s", out[hang:])
	}
	if strings.Contains(out[:hang], "restart:") || strings.Contains(out[:hang], "vigil: HUNG") {
		t.Fatalf("the saturated engine was treated as hung:\n%s", out[:hang])
	}

	// The limiter chapter's figures, measured beside the run without it.
	rows := comparison(t, out)
	num := func(label string, col int) int {
		t.Helper()
		cells, ok := rows[label]
		if !ok {
			t.Fatalf("the comparison lacks the row %q:\n%s", label, out)
		}
		n, err := strconv.Atoi(strings.Fields(cells[col])[0])
		if err != nil {
			t.Fatalf("row %q column %d: %q is not a count", label, col, cells[col])
		}
		return n
	}
	const direct, limited = 0, 1
	if num("calls (5s timeout, 2 retries)", direct) != num("calls (5s timeout, 2 retries)", limited) {
		t.Errorf("the two runs did not send the same overload:\n%s", out)
	}
	peakDirect, peakLimited := num("engine waiting-queue peak", direct), num("engine waiting-queue peak", limited)
	if peakDirect < 100 || peakLimited*4 > peakDirect {
		t.Errorf("engine waiting-queue peak %d through the limiter vs %d without: want a shallow queue (a quarter or less) against a deep one", peakLimited, peakDirect)
	}
	if a, b := num("calls answered", limited), num("calls answered", direct); a <= b || a == 0 {
		t.Errorf("calls answered: %d through the limiter vs %d without, want more through the limiter", a, b)
	}
	if n := num("429/503 with Retry-After", limited); n == 0 {
		t.Errorf("the limiter answered no 429/503 with Retry-After under a 2.5x overload")
	}
	if s := rows["429/503 with Retry-After"][limited]; !strings.Contains(s, "(Retry-After ") || strings.Contains(s, "without Retry-After") {
		t.Errorf("the limiter's 429/503 = %q: want every one with a Retry-After, and a sample of its values", s)
	}
	if n := num("429/503 with Retry-After", direct); n != 0 {
		t.Errorf("%d 429/503 with Retry-After straight at the engine: the run without the limiter went through it", n)
	}
	if n := num("retries attached to their running execution", limited); n == 0 {
		t.Errorf("no retry attached to its running execution through the limiter")
	}
	if e, a := num("requests the engine received (with vigil's probes)", limited), num("attempts sent", limited); e >= a {
		t.Errorf("through the limiter the engine received %d executions for %d attempts: want fewer (rejected and attached attempts run nothing)", e, a)
	}
}

// comparison reads the demo's side-by-side table: each row's label and its
// cells (straight at the engine, through the limiter).
func comparison(t *testing.T, out string) map[string][]string {
	t.Helper()
	i := strings.Index(out, "with and without vigil's limiter")
	if i < 0 {
		t.Fatalf("the demo printed no comparison:\n%s", out)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(out[i:], "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		if len(cells) == 3 && cells[0] != "" && !strings.HasPrefix(cells[0], "-") {
			rows[cells[0]] = cells[1:]
		}
	}
	return rows
}

// vigilDemo is `vigil-demo args...`, as `vigil demo` runs it.
func vigilDemo(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = runDemo(args, &out, &errOut)
	return code, out.String(), errOut.String()
}
