package e2e_test

// The parts every end-to-end test puts together: the simulated engine in a
// container of the shared dockerd, a real HAProxy in front of it,
// closed-loop load through HAProxy, the vigil binary as a subprocess, and
// a monitor that records what HAProxy and vigil said over time, so that a
// state that lasts only a moment (DRAIN, a ramp weight) is still seen.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

const (
	engineImage = "vigil-e2e/vllm-sim:1"
	backend     = "vllm"
	serverName  = "node1"

	// engineScale: engine time runs this many times faster than wall time.
	engineScale = 20
	// engineLoadTime is the engine's load time in engine time: its port
	// refuses for engineLoadTime/engineScale of wall time after every
	// (re)start, as vLLM's does while it loads weights.
	engineLoadTime = 40 * time.Second
	engineLoadWall = engineLoadTime / engineScale

	// startupGrace is watchdog.startup_grace: no restart within it of the
	// engine's start, so a test hangs the engine only after it has passed.
	startupGrace = 4 * time.Second
)

func skipShort(t *testing.T) {
	t.Helper()
	testinfra.Long(t, "end-to-end recovery tests take a minute")
}

// ---------------------------------------------------------------------------
// The engine in a container.

var (
	imageMu    sync.Mutex
	imageReady bool
)

// engine is one vllm-sim container on the host network.
type engine struct {
	d       *testinfra.Dockerd
	name    string
	api     string // host:port of the OpenAI API, /metrics, /health
	control string // host:port of the fault-control listener
}

// startEngine runs vllm-sim (time-scaled, with a load time) in a container
// called name, removed when the test ends, and waits until it serves.
func startEngine(t *testing.T, d *testinfra.Dockerd, name string, args ...string) *engine {
	t.Helper()
	importEngineImage(t, d)
	e := &engine{d: d, name: name, api: testinfra.FreeAddr(t), control: testinfra.FreeAddr(t)}
	cmd := append([]string{"/vllm-sim", "-listen", e.api, "-control", e.control,
		"-scale", fmt.Sprint(engineScale), "-load-time", engineLoadTime.String()}, args...)
	d.RunContainer(t, testinfra.Container{Name: name, Image: engineImage, Cmd: cmd})
	waitServing(t, e.api, 30*time.Second)
	return e
}

// importEngineImage builds vllm-sim and imports it as an image, once per
// test binary.
func importEngineImage(t *testing.T, d *testinfra.Dockerd) {
	t.Helper()
	imageMu.Lock()
	defer imageMu.Unlock()
	if !imageReady {
		bin := testinfra.BuildStatic(t, "./cmd/vllm-sim")
		d.ImportImage(t, engineImage, testinfra.ImageFile{Src: bin, Dst: "/vllm-sim"})
		imageReady = true
	}
}

// waitServing waits for /v1/models to answer 200 at api.
func waitServing(t *testing.T, api string, timeout time.Duration) {
	t.Helper()
	if err := serving(api, timeout); err != nil {
		t.Fatalf("engine at %s: %v", api, err)
	}
}

// serving is waitServing returning its error (for goroutines).
func serving(api string, timeout time.Duration) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := c.Get("http://" + api + "/v1/models")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not serving /v1/models after %s: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startedAt is the container's State.StartedAt.
func (e *engine) startedAt(t *testing.T) string {
	t.Helper()
	return e.d.StartedAt(t, e.name)
}

// waitPastGrace sleeps until the startup grace since the container's start
// has passed (plus a margin), so vigil's guards allow a restart.
func (e *engine) waitPastGrace(t *testing.T) {
	t.Helper()
	started, err := time.Parse(time.RFC3339Nano, e.startedAt(t))
	if err != nil {
		t.Fatalf("container %s StartedAt: %v", e.name, err)
	}
	time.Sleep(time.Until(started.Add(startupGrace + time.Second)))
}

// hang injects a hang: the engine core stops stepping while /v1/models,
// /health and /metrics keep answering (with frozen metrics).
func (e *engine) hang(t *testing.T) { e.fault(t, "/fault/hang", `"fault":"hang"`) }

// fault posts one fault-control request (e.g. "/fault/hang?rank=1") and
// checks the answer names the fault.
func (e *engine) fault(t *testing.T, path, want string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Post("http://"+e.control+path, "", nil)
	if err != nil {
		t.Fatalf("inject %s: %v", path, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		t.Fatalf("inject %s: %d %s", path, resp.StatusCode, body)
	}
}

// starts counts the container's "start" events between since and until,
// from the daemon's own event log: a restart is exactly one start, and
// two restarts that land in one second still count as two.
func (e *engine) starts(t *testing.T, since, until time.Time) int {
	t.Helper()
	out := e.d.CLI(t, "events", "--since", unixStamp(since), "--until", unixStamp(until),
		"--filter", "container="+e.name, "--filter", "event=start", "--format", "{{.Action}}")
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) == "start" {
			n++
		}
	}
	return n
}

func unixStamp(t time.Time) string { return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond()) }

// ---------------------------------------------------------------------------
// The engine behind HAProxy.

// rig is one engine container behind its own HAProxy.
type rig struct {
	d   *testinfra.Dockerd
	eng *engine
	h   *testinfra.HAProxy
}

// newRig starts the engine container name behind a fresh HAProxy (health
// checks on /health) and waits until HAProxy says the server is UP.
func newRig(t *testing.T, name string, engineArgs ...string) *rig {
	t.Helper()
	d := testinfra.StartDockerd(t)
	r := &rig{d: d, eng: startEngine(t, d, name, engineArgs...)}
	r.h = testinfra.StartHAProxyConfig(t, testinfra.HAProxyConfig{Backend: backend, HealthPath: "/health",
		Servers: []testinfra.Server{{Name: serverName, Addr: r.eng.api, Check: true}}})
	r.h.WaitStatus(t, serverName, "UP", 20*time.Second)
	return r
}

// haproxyServer reads server's status and weight from h's "show stat";
// it returns errors (testinfra's Servers), so it can run off the test
// goroutine.
func haproxyServer(h *testinfra.HAProxy, server string) (status, weight string, err error) {
	stat, err := h.Servers()
	if err != nil {
		return "", "", err
	}
	row, ok := stat[server]
	if !ok {
		return "", "", fmt.Errorf("show stat has no %s/%s", h.Backend, server)
	}
	return row["status"], row["weight"], nil
}

// ---------------------------------------------------------------------------
// Load through HAProxy.

// startLoad starts closed-loop clients sending completions through
// HAProxy's frontend; each pauses a moment after a failure so a drained
// backend's fast 503s stay bounded.
func startLoad(t *testing.T, baseURL string, clients, maxTokens int, timeout time.Duration) *testinfra.Load {
	t.Helper()
	return testinfra.StartLoad(t, testinfra.LoadSpec{URL: baseURL + "/v1/completions",
		Body:    fmt.Sprintf(`{"prompt":"the quick brown fox jumps over the lazy dog","max_tokens":%d}`, maxTokens),
		Clients: clients, Timeout: timeout, PauseAfterFailure: 100 * time.Millisecond})
}

// ---------------------------------------------------------------------------
// vigil as a subprocess.

// vigilConfig is the config file a test runs vigil with: every timing
// short, HAProxy and Docker real, a long cooldown so that a second restart
// for the same trouble would be refused.
type vigilConfig struct {
	Node             string
	EngineURL        string
	HAProxySocket    string
	Server           string
	DockerHost       string
	Container        string
	DrainTimeoutHung time.Duration
	StateFile        string
	StatusListen     string
	AdmissionListen  string
}

func (r *rig) vigilConfig(t *testing.T) vigilConfig {
	return vigilConfig{
		Node:             r.eng.name,
		EngineURL:        "http://" + r.eng.api,
		HAProxySocket:    r.h.SocketURL(),
		Server:           serverName,
		DockerHost:       r.d.Host,
		Container:        r.eng.name,
		DrainTimeoutHung: time.Second,
		StateFile:        filepath.Join(t.TempDir(), "state.json"),
		StatusListen:     testinfra.FreeAddr(t),
		AdmissionListen:  testinfra.FreeAddr(t),
	}
}

func (c vigilConfig) yaml() string {
	return fmt.Sprintf(`node: %s
engine:
  url: %s
  request_timeout: 1s
watchdog:
  interval: 250ms
  hang_after: 2s
  probe_timeout: 1s
  probe_slo: 800ms
  startup_grace: %s
  state_file: %s
load_balancer:
  kind: haproxy
  haproxy:
    socket: %s
    backend: %s
    server: %s
    timeout: 2s
  drain_timeout_hung: %s
  ramp_weights: [10, 50, 100]
  ramp_duration: 2s
restart:
  kind: docker
  docker:
    host: %s
    container: %s
    stop_timeout: 2s
  cooldown: 1h
  ready_timeout: 1m
alerts:
  kind: log
  digest: ""
admission:
  listen: %s
  shutdown_grace: 3s
status:
  listen: %s
`, c.Node, c.EngineURL, startupGrace, c.StateFile, c.HAProxySocket, backend, c.Server, c.DrainTimeoutHung,
		c.DockerHost, c.Container, c.AdmissionListen, c.StatusListen)
}

// vigil is `vigil run` on a test's config (testinfra.Vigil), possibly
// started more than once on the same config and state file.
type vigil struct {
	*testinfra.Vigil
	cfg vigilConfig
}

// startVigil writes cfg and starts vigil on it; it stops vigil when the
// test ends and prints its output if the test failed.
func startVigil(t *testing.T, cfg vigilConfig) *vigil {
	t.Helper()
	return startVigilYAML(t, cfg, cfg.yaml())
}

// startVigilYAML is startVigil on a config of its own (cfg.yaml() with
// more sections).
func startVigilYAML(t *testing.T, cfg vigilConfig, yml string) *vigil {
	t.Helper()
	return &vigil{Vigil: testinfra.StartVigil(t, yml, "http://"+cfg.StatusListen), cfg: cfg}
}

// statusDoc is the part of vigil's GET /status the tests read.
type statusDoc struct {
	Verdict struct {
		State  string `json:"state"`
		Reason string `json:"reason"`
	} `json:"verdict"`
	Incident *struct {
		ID       string    `json:"id"`
		State    string    `json:"state"`
		Peak     string    `json:"peak"`
		Resolved time.Time `json:"resolved"`
	} `json:"incident"`
	Recovery struct {
		Active           bool      `json:"active"`
		Incident         string    `json:"incident"`
		Step             string    `json:"step"`
		Drained          bool      `json:"drained"`
		LastRestart      time.Time `json:"last_restart"`
		RestartsInWindow int       `json:"restarts_in_window"`
		LastError        string    `json:"last_error"`
		Journal          struct {
			FailedStep string      `json:"failed_step"`
			Attempts   int         `json:"attempts"`
			History    []time.Time `json:"restart_history"`
		} `json:"journal"`
	} `json:"recovery"`
}

var statusClient = &http.Client{Timeout: time.Second}

func (v *vigil) status() (statusDoc, error) {
	return fetchStatus(v.StatusURL)
}

func fetchStatus(base string) (statusDoc, error) {
	var doc statusDoc
	err := testinfra.GetJSON(statusClient, base+"/status", &doc)
	return doc, err
}

// mustStatus reads /status, failing the test if vigil does not answer.
func (v *vigil) mustStatus(t *testing.T) statusDoc {
	t.Helper()
	doc, err := v.status()
	if err != nil {
		t.Fatalf("vigil /status: %v", err)
	}
	return doc
}

// journal reads the recovery section of vigil's state file, as the next
// vigil will find it.
func (v *vigil) journal(t *testing.T) (step string, drained bool) {
	t.Helper()
	data, err := os.ReadFile(v.cfg.StateFile)
	if err != nil {
		t.Fatalf("state file: %v", err)
	}
	var sections struct {
		Recovery struct {
			Step    string `json:"step"`
			Drained bool   `json:"drained"`
		} `json:"recovery"`
	}
	if err := json.Unmarshal(data, &sections); err != nil {
		t.Fatalf("state file %s: %v", v.cfg.StateFile, err)
	}
	return sections.Recovery.Step, sections.Recovery.Drained
}

// ---------------------------------------------------------------------------
// The monitor.

// obs is what HAProxy and vigil said at one moment.
type obs struct {
	At time.Time
	// HAStatus and HAWeight are HAProxy's "show stat" status and weight
	// for the server ("" when unreadable).
	HAStatus, HAWeight string
	// Verdict is vigil's verdict state, "" while vigil does not answer.
	Verdict string
	// Reason is the verdict's reason (not part of key: it changes with
	// every figure).
	Reason         string
	Step           string
	Drained        bool
	RecoveryActive bool
	IncidentOpen   bool
}

func (o obs) key() string {
	return fmt.Sprintf("%s|%s|%s|%s|%t|%t|%t", o.HAStatus, o.HAWeight, o.Verdict, o.Step, o.Drained, o.RecoveryActive, o.IncidentOpen)
}

func (o obs) String() string {
	v := o.Verdict
	if v == "" {
		v = "(vigil not answering)"
	}
	return fmt.Sprintf("%s haproxy=%q weight=%s verdict=%s step=%q drained=%t active=%t incident_open=%t",
		o.At.Format("15:04:05.000"), o.HAStatus, o.HAWeight, v, o.Step, o.Drained, o.RecoveryActive, o.IncidentOpen)
}

func (o obs) drain() bool { return strings.HasPrefix(o.HAStatus, "DRAIN") }

// upFull: back in rotation at 100% of its configured weight.
func (o obs) upFull() bool { return o.HAStatus == "UP" && o.HAWeight == "100" }

func (o obs) when() time.Time { return o.At }

// monitor polls HAProxy and vigil's /status every 50 ms and keeps every
// change, with its time.
type monitor struct{ *recorder[obs] }

func startMonitor(t *testing.T, h *testinfra.HAProxy, statusURL string) *monitor {
	t.Helper()
	return &monitor{record(t, 50*time.Millisecond, "what HAProxy and vigil said", func() (obs, bool) {
		o := obs{At: time.Now()}
		o.HAStatus, o.HAWeight, _ = haproxyServer(h, serverName)
		if doc, err := fetchStatus(statusURL); err == nil {
			o.Verdict, o.Step, o.Drained, o.RecoveryActive = doc.Verdict.State, doc.Recovery.Step, doc.Recovery.Drained, doc.Recovery.Active
			o.Reason = doc.Verdict.Reason
			o.IncidentOpen = doc.Incident != nil && doc.Incident.Resolved.IsZero()
		}
		return o, true
	})}
}

// share is the fraction of [from, to) during which f held.
func (m *monitor) share(from, to time.Time, f func(obs) bool) float64 {
	hist := m.changes()
	var held time.Duration
	for i, o := range hist {
		end := to
		if i+1 < len(hist) && hist[i+1].At.Before(to) {
			end = hist[i+1].At
		}
		start := o.At
		if start.Before(from) {
			start = from
		}
		if end.After(start) && f(o) {
			held += end.Sub(start)
		}
	}
	return held.Seconds() / to.Sub(from).Seconds()
}

// waitStatus polls vigil's /status until f accepts it.
func (v *vigil) waitStatus(t *testing.T, timeout time.Duration, what string, f func(statusDoc) bool) statusDoc {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last statusDoc
	var lastErr error
	for {
		doc, err := v.status()
		if err == nil && f(doc) {
			return doc
		}
		if err == nil {
			last = doc
		}
		lastErr = err
		if time.Now().After(deadline) {
			b, _ := json.Marshal(last)
			t.Fatalf("vigil's /status never showed %s within %s (last error %v); last: %s", what, timeout, lastErr, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
