package daemon

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/internal/testinfra/simengine"
	"github.com/vigil-dev/vigil/recoverer"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/state"
	"github.com/vigil-dev/vigil/watchdog"
)

func TestRunServesTheHealthCheckEndpoint(t *testing.T) {
	s := simengine.Start(t, nil)
	addr := testinfra.FreeAddr(t)
	td := startDaemon(t, testinfra.DaemonConfig(t, s.URL())+"load_balancer:\n  kind: healthcheck\n  healthcheck:\n    listen: "+addr+"\n")
	resp, err := http.Get("http://" + addr + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ready" {
		t.Fatalf("GET /ready = %d %q", resp.StatusCode, body)
	}
	td.stop()
	if _, err := http.Get("http://" + addr + "/ready"); err == nil {
		t.Fatal("the endpoint still answers after vigil stopped")
	}
}

func TestRunAnswersTheAgentCheck(t *testing.T) {
	s := simengine.Start(t, nil)
	addr := testinfra.FreeAddr(t)
	startDaemon(t, testinfra.DaemonConfig(t, s.URL())+"load_balancer:\n  kind: agent\n  agent:\n    listen: "+addr+"\n")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b, _ := io.ReadAll(conn)
	if string(b) != "up ready 100%\n" {
		t.Fatalf("agent answered %q", b)
	}
}

// vigil restarted with the host drained in its journal: the agent's
// first answer is "drain" (here a dry run leaves the resumed recovery
// where it is, so the answer stays).
func TestRunAnswersDrainFromTheStartWhenTheJournalSaysDrained(t *testing.T) {
	s := simengine.Start(t, nil)
	addr := testinfra.FreeAddr(t)
	yml := testinfra.DaemonConfig(t, s.URL()) + "load_balancer:\n  kind: agent\n  agent:\n    listen: " + addr + "\n"
	yml = strings.Replace(yml, "watchdog:\n", "watchdog:\n  dry_run: true\n", 1)
	cfg, err := configs.Parse([]byte(yml), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.Open(cfg.Watchdog.StateFile)
	if err != nil {
		t.Fatal(err)
	}
	j := recoverer.Journal{Incident: "inc-held", Verdict: watchdog.StateHung, Step: recovery.StepHeld, Drained: true, Hold: true}
	if err := st.Save(recoverer.JournalSection, j); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, yml)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b, _ := io.ReadAll(conn)
	if string(b) != "drain\n" {
		t.Fatalf("agent answered %q, want drain", b)
	}
}
