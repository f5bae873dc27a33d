package daemon

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/internal/testinfra/simengine"
)

// testDaemon runs `vigil run`'s daemon against url with fast settings.
type testDaemon struct {
	d          *daemon
	cfgPath    string
	statusURL  string
	proxyURL   string
	logs       *testinfra.Buffer
	cancel     context.CancelFunc
	done       chan error
	configYAML string
	stopOnce   sync.Once
}

func startDaemon(t *testing.T, yml string) *testDaemon {
	t.Helper()
	td := startDaemonWith(t, yml, Options{})
	td.waitListening(t)
	return td
}

func (td *testDaemon) stop() {
	td.stopOnce.Do(func() {
		td.cancel()
		select {
		case <-td.done:
		case <-time.After(15 * time.Second):
			panic("daemon did not stop within 15s")
		}
	})
}

// waitListening waits until the daemon's listeners accept connections.
func (td *testDaemon) waitListening(t *testing.T) {
	t.Helper()
	urls := []string{td.statusURL}
	if td.d.limiter != nil {
		urls = append(urls, td.proxyURL)
	}
	for _, u := range urls {
		addr := strings.TrimPrefix(u, "http://")
		deadline := time.Now().Add(5 * time.Second)
		for {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not listening: %v", addr, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func getBody(t *testing.T, url string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestTheDaemonServesStatusAndMetrics(t *testing.T) {
	s := simengine.Start(t, nil)
	td := startDaemon(t, testinfra.DaemonConfig(t, s.URL())+"  runbook_url: https://wiki.example.com/runbooks/vigil\n")
	// Traffic through the limiter, so its counters move.
	for range 3 {
		req, _ := testinfra.NewJSONPost(context.Background(), td.proxyURL+"/v1/completions", `{"prompt":"hi","max_tokens":3}`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		testinfra.Drain(resp)
	}
	time.Sleep(600 * time.Millisecond)

	var st struct {
		Node    string `json:"node"`
		Verdict struct {
			State    string          `json:"state"`
			Evidence json.RawMessage `json:"evidence"`
		} `json:"verdict"`
		Recovery   map[string]any `json:"recovery"`
		Limiter    map[string]any `json:"limiter"`
		Capacity   map[string]any `json:"capacity"`
		Overrides  []any          `json:"overrides"`
		Engine     string         `json:"engine"`
		Started    time.Time      `json:"started"`
		RunbookURL string         `json:"runbook_url"`
		Plan       struct {
			Restart      string `json:"restart"`
			LoadBalancer string `json:"load_balancer"`
			Summary      string `json:"summary"`
		} `json:"plan"`
	}
	if err := json.Unmarshal([]byte(getBody(t, td.statusURL+"/status")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Node != "test-node" || st.Verdict.State != "healthy" || st.Recovery == nil || st.Limiter == nil || st.Capacity == nil {
		t.Fatalf("/status lacks what an operator reads: %+v", st)
	}
	if st.Engine != s.URL() || st.Started.IsZero() || st.RunbookURL != "https://wiki.example.com/runbooks/vigil" ||
		st.Plan.Restart != "none" || st.Plan.LoadBalancer != "none" || !strings.Contains(st.Plan.Summary, "restart the engine by hand") {
		t.Errorf("/status lacks what this vigil watches and would do: engine %q, started %v, runbook %q, plan %+v",
			st.Engine, st.Started, st.RunbookURL, st.Plan)
	}
	if page := getBody(t, td.statusURL+"/"); !strings.Contains(page, `href="https://wiki.example.com/runbooks/vigil"`) {
		t.Errorf("the status page has no runbook link")
	}
	if calls, _ := st.Limiter["calls"].(float64); calls < 3 {
		t.Fatalf("/status limiter calls = %v, want >= 3", st.Limiter["calls"])
	}
	metrics := getBody(t, td.statusURL+"/metrics")
	for _, name := range []string{
		"vigil_watchdog_state", "vigil_watchdog_incidents_opened_total", "vigil_watchdog_probe_duration_seconds",
		"vigil_watchdog_scrape_errors_total", "vigil_recovery_restarts_total", "vigil_recovery_guard_refusals_total",
		"vigil_admission_", "vigil_alerts_outbox_queued", "vigil_overrides_active", "go_goroutines",
	} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

func TestSIGHUPWithABrokenConfigKeepsTheOldOne(t *testing.T) {
	s := simengine.Start(t, nil)
	td := startDaemon(t, testinfra.DaemonConfig(t, s.URL()))
	getBody(t, td.statusURL+"/healthz")

	os.WriteFile(td.cfgPath, []byte("watchdog:\n  hang_after: 1s\n  interval: 5s\n"), 0o600)
	td.d.reload(td.cfgPath, false)
	if got := td.d.watchdog.Thresholds().HangAfter; got != 2*time.Second {
		t.Fatalf("hang_after after a broken reload = %s, want the old 2s", got)
	}
	if !strings.Contains(td.logs.String(), "new config rejected; keeping the running one") ||
		!strings.Contains(td.logs.String(), "watchdog.hang_after (line 2): must be > interval (5s)") {
		t.Fatalf("the rejection and its error are not logged:\n%s", td.logs.String())
	}

	// A valid change applies at once.
	os.WriteFile(td.cfgPath, []byte(strings.Replace(td.configYAML, "hang_after: 2s", "hang_after: 4s", 1)), 0o600)
	td.d.reload(td.cfgPath, false)
	if got := td.d.watchdog.Thresholds().HangAfter; got != 4*time.Second {
		t.Fatalf("hang_after after a good reload = %s, want 4s", got)
	}
}

// notifySocket is systemd's notification socket as a test reads it: a
// unixgram socket named by NOTIFY_SOCKET for the test's duration. (Its
// directory is short: a unix socket path has a 108-byte limit that
// t.TempDir can exceed.)
func notifySocket(t *testing.T) *net.UnixConn {
	t.Helper()
	dir, err := os.MkdirTemp("", "vn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", sock)
	return conn
}

func TestSystemdNotificationsComeFromTheLoop(t *testing.T) {
	conn := notifySocket(t)

	s := simengine.Start(t, nil)
	td := startDaemon(t, testinfra.DaemonConfig(t, s.URL()))
	seen := map[string]bool{}
	read := func(until string) {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 4096)
		for !seen[until] {
			n, err := conn.Read(buf)
			if err != nil {
				t.Fatalf("waiting for %s: %v (seen %v)", until, err, seen)
			}
			for _, line := range strings.Split(string(buf[:n]), "\n") {
				if k, _, ok := strings.Cut(line, "="); ok && k != "STATUS" {
					seen[line] = true
				} else if ok {
					seen["STATUS"] = true
				}
			}
		}
	}
	read("READY=1")
	read("WATCHDOG=1")
	if !seen["STATUS"] {
		read("STATUS")
	}
	td.stop()
	read("STOPPING=1")
}

// startDaemonWith runs the daemon with Options (inherited sockets);
// unlike startDaemon it does not wait for the listeners.
func startDaemonWith(t *testing.T, yml string, o Options) *testDaemon {
	t.Helper()
	path := filepath.Join(t.TempDir(), "vigil.yaml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := configs.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	logs := &testinfra.Buffer{}
	l := logrus.New()
	l.SetOutput(logs)
	ctx, cancel := context.WithCancel(context.Background())
	d, err := newDaemon(ctx, cfg, logrus.NewEntry(l), o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	td := &testDaemon{d: d, cfgPath: path, statusURL: "http://" + cfg.Status.Listen, proxyURL: "http://" + cfg.Admission.Listen,
		logs: logs, cancel: cancel, done: make(chan error, 1), configYAML: yml}
	go func() { td.done <- d.run(ctx) }()
	t.Cleanup(td.stop)
	return td
}
