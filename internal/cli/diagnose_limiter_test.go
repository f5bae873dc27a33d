package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/internal/testinfra/simengine"
)

// The false wedge of the scale-25 rig, seen by hand: the engine's API
// server misses every probe's timeout while it streams the calls the
// local vigil proxies. diagnose, given the config `vigil run` uses, reads
// that vigil's limiter counts and says what the daemon says: SATURATED,
// not hung. When the streams end too (a true wedge) it says HUNG.
func TestDiagnoseCountsTheCallsAnsweredThroughTheLocalVigil(t *testing.T) {
	s := simengine.Start(t, func(c *enginesim.Config) { c.MaxNumSeqs = 8 })
	// Probes time out at 300 ms: a 500 ms starvation answers none of them.
	yml := strings.NewReplacer("admission:\n", "admission:\n  max_in_flight: 8\n",
		"request_timeout: 1s", "request_timeout: 300ms", "probe_timeout: 1s", "probe_timeout: 300ms", "probe_slo: 500ms", "probe_slo: 200ms").Replace(testinfra.DaemonConfig(t, s.URL()))
	td := startDaemon(t, yml)
	load := testinfra.StartLoad(t, testinfra.LoadSpec{
		URL: td.proxyURL + "/v1/completions", Body: `{"prompt":"hello there","max_tokens":40,"stream":true}`,
		Clients: 8, Timeout: 20 * time.Second, PauseAfterFailure: 100 * time.Millisecond,
	})
	defer load.Stop()
	testinfra.WaitFor(t, 10*time.Second, "calls answered through vigil", func() bool {
		ok, _ := load.Counts()
		return ok >= 8
	})

	s.Engine.StarveAPI(500 * time.Millisecond)
	diagnose := func() (int, string) {
		code, out, errOut := vigil(t, "diagnose", "--config", td.cfgPath, "--window", "1500ms", "--interval", "250ms", "--hang-after", "1s")
		t.Logf("diagnose exit %d:\n%s%s", code, errOut, out)
		return code, out
	}
	starved := time.Now()
	code, out := diagnose()
	if code != 1 || !strings.Contains(out, "SATURATED: API server timing out") || !strings.Contains(out, "calls answered through vigil in the last") {
		t.Fatalf("a starved API server streaming through vigil: diagnose exit %d, want 1 (SATURATED) saying the calls answered through vigil", code)
	}
	if row := throughRow(out); !strings.Contains(row, "calls answered") || strings.HasPrefix(row, "0 calls") || !strings.Contains(row, "the vigil at "+td.statusURL+", counts at ") {
		t.Errorf("diagnose's limiter evidence row %q, want calls answered, read from %s at every sample", row, td.statusURL)
	}
	if ok, _ := load.Tally(starved, time.Now()); ok == 0 {
		t.Fatal("no call answered through vigil while starved: the test proves nothing")
	}

	// Wedged: the streams under way end and nothing more comes through
	// vigil either. Wait for the limiter's reads to freeze, then diagnose.
	s.Engine.Wedge()
	lim := td.d.Limiter()
	last, still := lim.Load().EngineReads, time.Now()
	testinfra.WaitFor(t, 10*time.Second, "vigil's reads of the engine frozen", func() bool {
		if n := lim.Load().EngineReads; n != last {
			last, still = n, time.Now()
		}
		return time.Since(still) >= 300*time.Millisecond
	})
	code, out = diagnose()
	if code != 2 || !strings.Contains(out, "HUNG (wedged API server)") || !strings.Contains(out, "no byte through vigil's limiter for") {
		t.Fatalf("a wedged engine, silent through vigil too: diagnose exit %d, want 2 (HUNG) saying no byte came through vigil's limiter", code)
	}
	if row := throughRow(out); !strings.HasPrefix(row, "0 calls answered, 0 reads of the engine's answers") {
		t.Errorf("diagnose's limiter evidence row %q, want nothing through vigil", row)
	}
}

// throughRow is the value of diagnose's "through vigil" row, or "".
func throughRow(out string) string {
	for line := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "through vigil"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
