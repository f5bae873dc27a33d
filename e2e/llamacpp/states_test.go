package llamacpp_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

// Idle, llama-server is HEALTHY and vigil names it llamacpp; diagnose prints
// no figure the engine cannot give as a number.
func TestIdleHealthyAndTheKindDetected(t *testing.T) {
	testinfra.Alone(t) // a real engine on the shared cores: after the parallel suite
	_, eng := startEngine(t)

	out, code := diagnose(t, eng.URL(), "--json")
	var rep struct {
		State      string         `json:"state"`
		EngineKind string         `json:"engine_kind"`
		Evidence   map[string]any `json:"evidence"`
		Lacks      []string       `json:"engine_lacks"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("diagnose --json: %v:\n%s", err, out)
	}
	if code != 0 || rep.State != "healthy" || rep.EngineKind != "llamacpp" {
		t.Fatalf("diagnose: exit %d, state %q, kind %q, want 0, healthy, llamacpp:\n%s", code, rep.State, rep.EngineKind, out)
	}
	if _, has := rep.Evidence["completions_per_second"]; has {
		t.Errorf("diagnose --json gives a completion rate llama.cpp does not count: %v", rep.Evidence["completions_per_second"])
	}

	v := startVigil(t, config{engine: eng.URL()})
	m := v.watch(t)
	_, s := m.waitState(t, "healthy", 10*time.Second)
	if !strings.Contains(v.Logs.String(), "engine kind: llamacpp") {
		t.Errorf("vigil run did not log the engine kind as llamacpp:\n%s", v.Logs.String())
	}
	if _, has := s.Verdict.Evidence["completions_per_second"]; has {
		t.Errorf("/status gives a completion rate llama.cpp does not count: %v", s.Verdict.Evidence)
	}
}

// Far more clients than slots: the engine queues them and keeps
// completing, which is SATURATED (page, never restart) and never HUNG. The
// evidence carries the engine's real token rate, and diagnose prints every
// figure true: no "completions/s 0" while calls complete.
func TestOverloadPastTheSlotsIsSaturatedNeverHung(t *testing.T) {
	testinfra.Alone(t) // a real engine on the shared cores: after the parallel suite
	_, eng := startEngine(t)
	v := startVigil(t, config{engine: eng.URL(), hangAfter: 10 * time.Second})
	m := v.watch(t)
	m.waitState(t, "healthy", 10*time.Second)

	from := time.Now()
	l := startLoad(t, eng.URL(), 24, 24)
	_, s := m.waitState(t, "saturated", 15*time.Second)
	if tps, _ := s.Verdict.Evidence["tokens_per_second"].(float64); tps <= 0 {
		t.Errorf("saturated with no token rate in the evidence: %v", s.Verdict.Evidence)
	}
	if _, has := s.Verdict.Evidence["completions_per_second"]; has {
		t.Errorf("evidence has a completion rate llama.cpp does not count: %v", s.Verdict.Evidence)
	}

	// diagnose under the same load.
	okBefore, _ := l.Counts()
	dstart := time.Now()
	out, code := diagnose(t, eng.URL())
	okAfter, failed := l.Counts()
	rate := float64(okAfter-okBefore) / time.Since(dstart).Seconds()
	l.Stop()
	if code != 1 || !strings.Contains(out, "SATURATED (exit 1)") {
		t.Fatalf("diagnose under load: exit %d, want 1 (saturated):\n%s", code, out)
	}
	checkDiagnoseFigures(t, out, rate)
	if len(failed) > 0 {
		t.Errorf("%d calls failed against the engine directly: %v", len(failed), failed[:min(len(failed), 5)])
	}
	if seen := m.states(from); strings.Contains(seen, "hung") || strings.Contains(seen, "down") {
		t.Fatalf("an overloaded engine that completes %0.1f calls/s was judged %s", rate, seen)
	}
	t.Logf("%.1f calls/s completed; verdicts %s", rate, m.states(from))
}

// checkDiagnoseFigures checks every figure diagnose printed for a loaded
// llama.cpp: the ones it can read are numbers that fit the load, the ones
// llama.cpp does not export say unknown, and none is 0 for want of a series.
func checkDiagnoseFigures(t *testing.T, out string, completed float64) {
	t.Helper()
	want := []*regexp.Regexp{
		regexp.MustCompile(`(?m)^  /v1/models +200 in \S+ \(\S+\)$`),
		regexp.MustCompile(`(?m)^  /health +200 in \S+$`),
		regexp.MustCompile(`(?m)^  waiting +([1-9][0-9]*) \(saturated at 8\)$`),
		regexp.MustCompile(`(?m)^  running +2$`),
		regexp.MustCompile(`(?m)^  completions/s +unknown \(the engine counts no finished requests; its token rate is under Progress\)$`),
		regexp.MustCompile(`(?m)^  tokens +\+[1-9][0-9.,k]* \([1-9][0-9.,k]* tok/s\)$`),
		regexp.MustCompile(`(?m)^  heartbeat +\+[1-9][0-9.,k]* llamacpp:n_decode_total$`),
		regexp.MustCompile(`(?m)^  in flight +unknown \(the engine exports no request latency histogram for Little's law\)$`),
		regexp.MustCompile(`(?m)^  slots +2, [0-2] processing \(llama.cpp's /slots: the most it runs at once\)$`),
		regexp.MustCompile(`(?m)^  recommended cap +max_in_flight 2: the engine's slots; more only queues inside it \(configured: automatic\)$`),
		regexp.MustCompile(`(?m)^  retry storm +not judged \(the engine exports no prompt-token or prefix-cache query counter\)$`),
	}
	for _, re := range want {
		if !re.MatchString(out) {
			t.Errorf("diagnose lacks a line matching %s:\n%s", re, out)
		}
	}
	// No row that reads as a measured zero (a figure unknown is said so).
	for _, line := range strings.Split(out, "\n") {
		if regexp.MustCompile(`^  (completions/s|tokens|in flight|running|executing) +0\b`).MatchString(line) {
			t.Errorf("diagnose prints a 0 under load (%0.1f calls/s completed): %q", completed, line)
		}
	}
}

// SIGSTOP freezes the whole engine with work in it: HUNG within hang_after
// (plus the request timeouts that prove nothing answers), then the restart command (here SIGCONT: the
// process's own restart) recovers it, and through the limiter no client
// call is lost: every one is answered 200.
func TestStopUnderLoadIsHungAndRecoveredWithNoCallLost(t *testing.T) {
	testinfra.Alone(t) // a real engine on the shared cores: after the parallel suite
	_, eng := startEngine(t)
	v := startVigil(t, config{engine: eng.URL(), admission: true,
		restart: []string{"kill", "-CONT", fmt.Sprint(eng.Pid())}})
	m := v.watch(t)
	m.waitState(t, "healthy", 10*time.Second)

	l := startLoad(t, v.admissionURL, 6, 16)
	time.Sleep(1500 * time.Millisecond) // past the startup grace, with work in the engine
	if ok, _ := l.Counts(); ok == 0 {
		t.Fatal("no call completed through the limiter before the fault")
	}
	stopped := time.Now()
	eng.Signal(t, syscall.SIGSTOP)
	// A stopped process answers nothing, /metrics included: a wedged API
	// server, proven by request timeouts (2 s) lasting hang_after (3 s).
	// The verdict may be HUNG for less than the monitor's 100 ms (the
	// restart command is instant): vigil's log says when it opened.
	hungAt := v.waitLog(t, "incident opened: HUNG", 12*time.Second)
	if d := hungAt.Sub(stopped); d > 3*time.Second+2*2*time.Second+time.Second {
		t.Errorf("HUNG %s after SIGSTOP, want within hang_after 3s + two 2s request timeouts + a second", d.Round(time.Millisecond))
	}
	v.waitLog(t, "incident resolved", 30*time.Second)
	_, s := m.waitState(t, "healthy", 5*time.Second)
	if s.Recovery.LastRestart.Before(stopped) {
		t.Fatalf("healthy again without a restart (last %s, recovery error %q)", s.Recovery.LastRestart, s.Recovery.LastError)
	}
	time.Sleep(time.Second) // calls held through the hang finish
	l.Stop()
	ok, failed := l.Counts()
	if len(failed) > 0 {
		t.Fatalf("%d of %d calls through the limiter lost across the hang and restart: %v", len(failed), ok+len(failed), failed[:min(len(failed), 5)])
	}
	t.Logf("HUNG %s after SIGSTOP; %d calls, none lost; verdicts %s", hungAt.Sub(stopped).Round(time.Millisecond), ok, m.states(stopped))
}

// SIGKILL: nothing listens any more, which is DOWN.
func TestKilledEngineIsDown(t *testing.T) {
	testinfra.Alone(t) // a real engine on the shared cores: after the parallel suite
	_, eng := startEngine(t)
	v := startVigil(t, config{engine: eng.URL()})
	m := v.watch(t)
	m.waitState(t, "healthy", 10*time.Second)
	time.Sleep(time.Second) // past the startup grace
	killed := time.Now()
	eng.Signal(t, syscall.SIGKILL)
	m.waitState(t, "down", 5*time.Second)
	if seen := m.states(killed); strings.Contains(seen, "hung") {
		t.Errorf("a killed engine was judged hung on the way down: %s", seen)
	}
}

// vigil started before the engine: while it comes up (the port refusing,
// then /health 503 "Loading model") the verdict is LOADING, then HEALTHY,
// never DOWN or HUNG.
func TestAnEngineStillLoadingIsLoading(t *testing.T) {
	testinfra.Alone(t) // a real engine on the shared cores: after the parallel suite
	testinfra.Long(t, "tests against a real llama-server")
	l := testinfra.FindLlamaCpp(t)
	addr := testinfra.FreeAddr(t)
	v := startVigil(t, config{engine: "http://" + addr, grace: 30 * time.Second})
	m := v.watch(t)
	from := time.Now()
	m.waitState(t, "loading", 5*time.Second)
	time.Sleep(time.Second) // vigil sees the port refuse
	eng := l.StartLlamaServer(t, addr, "--parallel", fmt.Sprint(slots))
	eng.WaitReady(t, 30*time.Second)
	m.waitState(t, "healthy", 15*time.Second)
	if seen := m.states(from); strings.Contains(seen, "down") || strings.Contains(seen, "hung") {
		t.Fatalf("an engine loading its model was judged %s", seen)
	}
}
