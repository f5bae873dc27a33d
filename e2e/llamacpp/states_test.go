package llamacpp_test

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

// Idle, llama-server is HEALTHY and vigil names it llamacpp; diagnose,
// text and --json, prints every figure true and none the engine cannot
// give (diagnose_test.go).
func TestIdleHealthyAndTheKindDetected(t *testing.T) {
	testinfra.Alone(t) // a real engine on the shared cores: after the parallel suite
	_, eng := startEngine(t)

	// Idle needs no long window, and the two run one after the other.
	const idleWindow = 1500 * time.Millisecond
	checkIdle(t, diagnoseBoth(t, eng.URL(), false, idleWindow), idleWindow)

	v := startVigil(t, config{engine: eng.URL()})
	m := v.watch(t)
	_, s := m.waitState(t, "healthy", 10*time.Second)
	if !strings.Contains(v.Logs.String(), "engine kind: llamacpp") {
		t.Errorf("vigil run did not log the engine kind as llamacpp:\n%s", v.Logs.String())
	}
	if _, has := s.Verdict.Evidence["completions_per_second"]; has {
		t.Errorf("/status gives a completion rate llama.cpp does not count: %v", s.Verdict.Evidence)
	}
	// /status's capacity block: no 0 for what llama.cpp does not count.
	var st struct {
		Capacity map[string]any `json:"capacity"`
	}
	if err := testinfra.GetJSON(statusClient, v.StatusURL+"/status", &st); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"completions_per_second", "in_flight"} {
		if val, has := st.Capacity[k]; has {
			t.Errorf("/status capacity gives %s %v, which llama.cpp does not count: %v", k, val, st.Capacity)
		}
	}
	if _, has := st.Capacity["tokens_per_second"]; !has {
		t.Errorf("/status capacity lacks the token rate: %v", st.Capacity)
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

	// diagnose, text and --json together, under the same load.
	okBefore, _ := l.Counts()
	dstart := time.Now()
	d := diagnoseBoth(t, eng.URL(), true, diagnoseWindow)
	okAfter, failed := l.Counts()
	rate := float64(okAfter-okBefore) / time.Since(dstart).Seconds()
	l.Stop()
	checkLoaded(t, d, diagnoseWindow, 24)
	if len(failed) > 0 {
		t.Errorf("%d calls failed against the engine directly: %v", len(failed), failed[:min(len(failed), 5)])
	}
	if seen := m.states(from); strings.Contains(seen, "hung") || strings.Contains(seen, "down") {
		t.Fatalf("an overloaded engine that completes %0.1f calls/s was judged %s", rate, seen)
	}
	t.Logf("%.1f calls/s completed; verdicts %s", rate, m.states(from))
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

// Both slots in one long generation each: llama.cpp's token counters
// stand still (it counts generated tokens when a request ends, prompt
// tokens once at its start) and vigil's probe waits for a slot, so the
// decode heartbeat (n_decode_total, every llama_decode()) is all that
// shows progress for longer than hang_after: never HUNG. It is the
// per-step evidence /slots' per-slot n_decoded would give, read from the
// scrape vigil takes anyway. Then SIGKILL: nothing listens any more, which
// is DOWN.
func TestKilledEngineIsDown(t *testing.T) {
	testinfra.Alone(t) // a real engine on the shared cores: after the parallel suite
	testinfra.Long(t, "tests against a real llama-server")
	// llama-server caps a slot's context at the model's training context
	// (2,048 tokens here) and, without --context-shift, ends a generation
	// that fills it: 2,000 tokens took under the 4 s this needs on a quiet
	// machine. Shifted, 8,000 tokens take over 15 s.
	eng := testinfra.FindLlamaCpp(t).StartLlamaServer(t, "", "--parallel", fmt.Sprint(slots), "--context-shift")
	eng.WaitReady(t, 30*time.Second)
	v := startVigil(t, config{engine: eng.URL()})
	m := v.watch(t)
	m.waitState(t, "healthy", 10*time.Second)

	// The kill ends them.
	l := startLoad(t, eng.URL(), slots, 8000)
	time.Sleep(500 * time.Millisecond) // both prompts evaluated
	tok0, beat0 := engineCounters(t, eng.URL())
	from := time.Now()
	time.Sleep(3*time.Second + time.Second) // hang_after 3 s, and a second
	tok1, beat1 := engineCounters(t, eng.URL())
	if ok, _ := l.Counts(); ok > 0 || tok1 != tok0 || beat1 <= beat0 {
		t.Fatalf("the premise: %d calls ended, tokens +%.0f, n_decode_total +%.0f; want none ended, tokens still, decode moving", ok, tok1-tok0, beat1-beat0)
	}
	if seen := m.states(from); strings.Contains(seen, "hung") || strings.Contains(seen, "unknown") {
		t.Errorf("two long generations, token counters still for %s while n_decode_total moved +%.0f, were judged %s",
			time.Since(from).Round(time.Millisecond), beat1-beat0, seen)
	}
	t.Logf("long generations: tokens still, n_decode_total +%.0f in %s; verdicts %s", beat1-beat0, time.Since(from).Round(time.Millisecond), m.states(from))

	killed := time.Now()
	eng.Signal(t, syscall.SIGKILL)
	m.waitState(t, "down", 5*time.Second)
	if seen := m.states(killed); strings.Contains(seen, "hung") {
		t.Errorf("a killed engine was judged hung on the way down: %s", seen)
	}
	l.Stop()
}

// vigil started before the engine: while it comes up (the port refusing,
// then /health, /v1/models and /metrics answering 503 "Loading model")
// the verdict is LOADING, then HEALTHY, never DOWN or HUNG. The tiny model
// loads in tens of milliseconds, less than a cycle, so the 503 stage is
// held open: a llama-server reading its model from a FIFO nobody writes
// serves its API and waits in its load; it is killed and the real one
// started in its place.
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

	fifo := filepath.Join(t.TempDir(), "loading.gguf")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The last --model given wins; --load-mode none reads the file
	// rather than mapping it.
	loading := l.StartLlamaServer(t, addr, "--model", fifo, "--load-mode", "none")
	var seen503 string
	testinfra.WaitFor(t, 10*time.Second, "vigil to see llama-server answer 503 while it loads", func() bool {
		for _, o := range m.since(from) {
			if o.s.Verdict.State == "loading" && strings.Contains(o.s.Verdict.Reason, "/v1/models 503") {
				seen503 = o.s.Verdict.Reason
			}
		}
		return seen503 != ""
	})
	t.Logf("while llama-server loads: %s", seen503)
	if body, err := statusClient.Get("http://" + addr + "/health"); err == nil {
		b, _ := io.ReadAll(body.Body)
		body.Body.Close()
		if body.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "Loading model") {
			t.Errorf("the loading llama-server's /health: %d %s, want 503 Loading model", body.StatusCode, b)
		}
	}
	loading.Signal(t, syscall.SIGKILL)
	testinfra.WaitFor(t, 5*time.Second, "the loading llama-server to exit", loading.Exited)

	eng := l.StartLlamaServer(t, addr, "--parallel", fmt.Sprint(slots))
	eng.WaitReady(t, 30*time.Second)
	m.waitState(t, "healthy", 15*time.Second)
	if seen := m.states(from); strings.Contains(seen, "down") || strings.Contains(seen, "hung") {
		t.Fatalf("an engine loading its model was judged %s", seen)
	}
}
