package llamacpp_test

// What every test here puts together: a llama-server on loopback (2 slots,
// the tiny model), the vigil binary as a subprocess watching it, closed-loop
// clients, and a monitor of vigil's /status so that a state that lasts a
// moment is still seen.

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

// slots is llama-server's --parallel: the requests it runs at once.
const slots = 2

// startEngine starts llama-server with slots slots and waits for its model.
func startEngine(t *testing.T) (testinfra.LlamaCpp, *testinfra.LlamaServer) {
	t.Helper()
	testinfra.Long(t, "tests against a real llama-server")
	l := testinfra.FindLlamaCpp(t)
	s := l.StartLlamaServer(t, "", "--parallel", fmt.Sprint(slots))
	s.WaitReady(t, 30*time.Second)
	return l, s
}

// config is what a test varies in vigil's config file.
type config struct {
	engine    string   // engine base URL
	restart   []string // restart.command.argv; nil: restart.kind none
	admission bool
	grace     time.Duration // watchdog.startup_grace; 0: 1s
	hangAfter time.Duration // watchdog.hang_after; 0: 3s
	// dockerHost and container: restart.kind docker on this container
	// (when restart is nil).
	dockerHost, container string
}

// vigil is `vigil run` (testinfra.Vigil) and its admission limiter's URL.
type vigil struct {
	*testinfra.Vigil
	admissionURL string
}

// startVigil runs `vigil run` on a config with every timing short: a 250 ms
// cycle, hang_after 3 s (llama.cpp moves n_decode_total at every step, so a
// frozen engine shows in one cycle), a 1 s startup grace. Not shorter: on a
// starved 2-core machine llama-server, under a burst of 24 clients, once
// answered no endpoint within 1 s for 2 s, which with hang_after 2 s is a
// wedged API server (HUNG) while it completed 35 calls a second; under 24
// clients its /health has taken over 2 s, so the overload test, which
// needs no quick hang, runs with a longer hang_after, as auto would.
func startVigil(t *testing.T, c config) *vigil {
	t.Helper()
	statusURL, admissionURL := "http://"+testinfra.FreeAddr(t), "http://"+testinfra.FreeAddr(t)
	restart := "restart:\n  kind: none\n"
	if c.container != "" {
		restart = fmt.Sprintf("restart:\n  kind: docker\n  docker:\n    host: %s\n    container: %s\n    stop_timeout: 2s\n  cooldown: 1h\n  ready_timeout: 30s\n",
			c.dockerHost, c.container)
	}
	if c.restart != nil {
		argv, _ := json.Marshal(c.restart)
		restart = fmt.Sprintf("restart:\n  kind: command\n  command:\n    argv: %s\n    timeout: 5s\n  cooldown: 1h\n  ready_timeout: 30s\n", argv)
	}
	yml := fmt.Sprintf(`node: llama
engine:
  url: %s
  request_timeout: 2s
watchdog:
  interval: 250ms
  hang_after: %s
  probe_timeout: 2s
  probe_slo: 1500ms
  startup_grace: %s
  state_file: %s
%salerts:
  kind: log
  digest: ""
admission:
  enabled: %t
  listen: %s
  shutdown_grace: 1s
status:
  listen: %s
`, c.engine, cmp.Or(c.hangAfter, 3*time.Second), max(c.grace, time.Second), filepath.Join(t.TempDir(), "state.json"), restart, c.admission,
		strings.TrimPrefix(admissionURL, "http://"), strings.TrimPrefix(statusURL, "http://"))
	return &vigil{testinfra.StartVigil(t, yml, statusURL), admissionURL}
}

// waitLog waits until vigil's output has a line containing want and
// returns when the test saw it.
func (v *vigil) waitLog(t *testing.T, want string, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if strings.Contains(v.Logs.String(), want) {
			return time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("vigil never logged %q within %s", want, within)
	return time.Time{}
}

// status is the part of vigil's GET /status the tests read.
type status struct {
	Verdict struct {
		State    string         `json:"state"`
		Reason   string         `json:"reason"`
		Evidence map[string]any `json:"evidence"`
	} `json:"verdict"`
	Recovery struct {
		LastRestart time.Time `json:"last_restart"`
		LastError   string    `json:"last_error"`
	} `json:"recovery"`
	Limiter *struct {
		Cap       int  `json:"cap"`
		Automatic bool `json:"automatic"`
		InFlight  int  `json:"in_flight"`
	} `json:"limiter"`
}

var statusClient = &http.Client{Timeout: time.Second}

func (v *vigil) status() (status, error) {
	var s status
	err := testinfra.GetJSON(statusClient, v.StatusURL+"/status", &s)
	return s, err
}

// monitor records every verdict vigil's /status shows, every 100 ms.
type monitor struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	seen []observed
}

type observed struct {
	at time.Time
	s  status
}

func (v *vigil) watch(t *testing.T) *monitor {
	m := &monitor{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			if s, err := v.status(); err == nil {
				m.mu.Lock()
				m.seen = append(m.seen, observed{time.Now(), s})
				m.mu.Unlock()
			}
			select {
			case <-m.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(m.close)
	return m
}

func (m *monitor) close() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
}

// since returns the observations at or after from.
func (m *monitor) since(from time.Time) []observed {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []observed
	for _, o := range m.seen {
		if !o.at.Before(from) {
			out = append(out, o)
		}
	}
	return out
}

// waitState waits until vigil's verdict is state and returns when it was
// first seen.
func (m *monitor) waitState(t *testing.T, state string, within time.Duration) (time.Time, status) {
	t.Helper()
	from := time.Now()
	deadline := from.Add(within)
	for time.Now().Before(deadline) {
		for _, o := range m.since(from) {
			if o.s.Verdict.State == state {
				return o.at, o.s
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("vigil's verdict never %s within %s; saw %s", state, within, m.states(from))
	return time.Time{}, status{}
}

// states names the verdicts seen since from, collapsed: "healthy > saturated".
func (m *monitor) states(from time.Time) string {
	var out []string
	for _, o := range m.since(from) {
		if len(out) == 0 || out[len(out)-1] != o.s.Verdict.State {
			out = append(out, o.s.Verdict.State)
		}
	}
	return strings.Join(out, " > ")
}

// completion is the body every client sends: a short prompt and a fixed
// number of tokens (ignore_eos: the random model may end early otherwise).
func completion(maxTokens int) string {
	return fmt.Sprintf(`{"prompt":"the engine serves requests from a queue","max_tokens":%d,"ignore_eos":true}`, maxTokens)
}

// startLoad starts closed-loop clients posting completions to base: each
// sends its next request when the last one ended.
func startLoad(t *testing.T, base string, clients, maxTokens int) *testinfra.Load {
	t.Helper()
	return testinfra.StartLoad(t, testinfra.LoadSpec{URL: base + "/v1/completions", Body: completion(maxTokens),
		Clients: clients, Timeout: 60 * time.Second})
}

// scrapeClient waits longer than vigil's request timeout: llama-server
// answers /metrics from its task loop, between decode steps, and under
// load on a busy machine that has taken over a second.
var scrapeClient = &http.Client{Timeout: 5 * time.Second}

// scrape reads one gauge or counter of the engine's /metrics.
func scrape(engine, name string) (float64, error) {
	resp, err := scrapeClient.Get(engine + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f, nil
			}
		}
	}
	return 0, fmt.Errorf("no %s in %d bytes: %.200s", name, len(body), body)
}

// diagnoseWindow is the --window a diagnose here samples (a later
// --window in args wins).
const diagnoseWindow = 3 * time.Second

// diagnose runs `vigil diagnose` against engine and returns its output and
// exit code.
func diagnose(t *testing.T, engine string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(testinfra.BuildStatic(t, "./cmd/vigil"),
		append([]string{"diagnose", "--engine", engine, "--window", diagnoseWindow.String(), "--interval", "500ms"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("vigil diagnose: %v", err)
	}
	return out.String(), code
}
