package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack/slacktest"

	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/internal/testinfra/simengine"
)

// runVigil is `vigil run --config` on yml, which must return within limit:
// a daemon that cannot start must say so and exit, not wait for SIGTERM.
func runVigil(t *testing.T, yml string, limit time.Duration) (code int, stderr string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "vigil.yaml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return runVigilFile(t, path, limit)
}

func runVigilFile(t *testing.T, path string, limit time.Duration) (code int, stderr string) {
	t.Helper()
	type result struct {
		code   int
		stderr string
	}
	done := make(chan result, 1)
	go func() {
		var errOut strings.Builder
		code := Main(Flags{Config: path, LogLevel: "info"}, &errOut)
		done <- result{code, errOut.String()}
	}()
	select {
	case r := <-done:
		return r.code, r.stderr
	case <-time.After(limit):
		t.Fatalf("vigil run did not exit within %s", limit)
		return 0, ""
	}
}

func TestRunExitsAtOnceWhenAPartCannotStart(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().String()
	cases := []struct {
		name string
		edit func(yml string) string
		want []string
	}{
		{"the status port is taken", func(yml string) string {
			return replaceListen(yml, "status", busy)
		}, []string{"status.listen " + busy + ": cannot listen: bind: address already in use"}},
		{"the admission port is taken", func(yml string) string {
			return replaceListen(yml, "admission", busy)
		}, []string{"admission.listen " + busy + ": cannot listen: bind: address already in use"}},
		{"the state file is corrupt", func(yml string) string {
			bad := filepath.Join(t.TempDir(), "state.json")
			if err := os.WriteFile(bad, []byte("{not json"), 0o600); err != nil {
				t.Fatal(err)
			}
			return replaceLine(yml, "  state_file: ", "  state_file: "+bad)
		}, []string{"watchdog.state_file", "is corrupt"}},
		{"the health-check port is taken", func(yml string) string {
			return yml + "load_balancer:\n  kind: healthcheck\n  healthcheck:\n    listen: " + busy + "\n"
		}, []string{"healthcheck: listen (load_balancer.healthcheck.listen)", "address already in use"}},
		{"the agent port is taken", func(yml string) string {
			return yml + "load_balancer:\n  kind: agent\n  agent:\n    listen: " + busy + "\n"
		}, []string{"agent: listen (load_balancer.agent.listen)", "address already in use"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// No engine: vigil must fail before it samples anything.
			yml := tc.edit(testinfra.DaemonConfig(t, "http://"+testinfra.FreeAddr(t)))
			start := time.Now()
			code, stderr := runVigil(t, yml, 10*time.Second)
			if code != exitFail {
				t.Errorf("exit %d, want %d", code, exitFail)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if !strings.Contains(stderr, "vigil cannot start") {
				t.Errorf("stderr does not say vigil cannot start:\n%s", stderr)
			}
			t.Logf("exited %d after %s", code, time.Since(start).Round(time.Millisecond))
		})
	}
}

func TestAPartThatDiesLaterStopsTheWholeDaemon(t *testing.T) {
	cases := []struct {
		name    string
		kill    func(d *daemon)
		want    string
		stopped func(td *testDaemon) string // the address that must no longer answer
	}{
		{"the status listener dies: the proxy and the watchdog stop too",
			func(d *daemon) { d.statusLn.Close() }, "status.listen",
			func(td *testDaemon) string { return td.proxyURL }},
		{"the admission listener dies: the status listener and the watchdog stop too",
			func(d *daemon) { d.admissionLn.Close() }, "admission.listen",
			func(td *testDaemon) string { return td.statusURL }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := simengine.Start(t, nil)
			td := startDaemon(t, testinfra.DaemonConfig(t, s.URL()))
			getBody(t, td.statusURL+"/healthz")
			tc.kill(td.d)
			var err error
			select {
			case err = <-td.done:
				td.done <- err // for stop
			case <-time.After(10 * time.Second):
				t.Fatal("the daemon kept running after one of its parts died")
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run = %v, want an error naming %s", err, tc.want)
			}
			addr := strings.TrimPrefix(tc.stopped(td), "http://")
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				t.Fatalf("%s still accepts connections after the daemon stopped", addr)
			}
			if !strings.Contains(td.logs.String(), "a part of vigil failed; stopping every part") {
				t.Fatalf("the failure is not logged:\n%s", td.logs.String())
			}
		})
	}
}

func TestSupervisorStopsEveryPartOnTheFirstFailure(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name    string
		mustRun bool
		part    func(ctx context.Context) error
		want    string // "" = no failure; the parent's end stops everything
	}{
		{"an error", untilStopped, func(context.Context) error { return boom }, "dying part: boom"},
		{"a panic", untilStopped, func(context.Context) error { panic("nil map") }, "dying part: panic: nil map"},
		{"a return before the end", untilStopped, func(context.Context) error { return nil }, "dying part: stopped on its own"},
		{"a one-shot part may return", !untilStopped, func(context.Context) error { return nil }, ""},
		{"a part that runs until the end", untilStopped, func(ctx context.Context) error { <-ctx.Done(); return nil }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := logrus.New()
			l.SetOutput(io.Discard)
			parent, cancel := context.WithCancel(context.Background())
			defer cancel()
			sup := newSupervisor(parent, logrus.NewEntry(l))
			other := sup.Go("other part", untilStopped, func(ctx context.Context) error { <-ctx.Done(); return nil })
			sup.Go("dying part", tc.mustRun, tc.part)
			if tc.want == "" {
				select {
				case <-other:
					t.Fatalf("the other part stopped: %v", sup.Err())
				case <-time.After(50 * time.Millisecond):
				}
				cancel()
			}
			select {
			case <-other:
			case <-time.After(5 * time.Second):
				t.Fatal("the other part kept running")
			}
			sup.Wait()
			err := sup.Err()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.Error() != tc.want) {
				t.Fatalf("Err = %v, want %q", err, tc.want)
			}
		})
	}
}

// replaceListen sets section's listen: in a daemonConfig.
func replaceListen(yml, section, addr string) string {
	lines := strings.Split(yml, "\n")
	for i, l := range lines {
		if l == section+":" && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "  listen: ") {
			lines[i+1] = "  listen: " + addr
		}
	}
	return strings.Join(lines, "\n")
}

// replaceLine replaces the line starting with prefix.
func replaceLine(yml, prefix, with string) string {
	lines := strings.Split(yml, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, prefix) {
			lines[i] = with
		}
	}
	return strings.Join(lines, "\n")
}

// Issue #16: a wrong Slack token was found only when the first page
// failed. `vigil run` now asks Slack (auth.test) at start and exits 1
// naming where the token came from, never the token.
func TestRunExitsAtOnceOnARefusedSlackToken(t *testing.T) {
	st := slacktest.NewTestServer(func(c slacktest.Customize) {
		c.Handle("/auth.test", func(w http.ResponseWriter, r *http.Request) {
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "invalid_auth"})
		})
	})
	st.Start()
	defer st.Stop()
	t.Setenv("VIGIL_TEST_REFUSED_TOKEN", "xoxb-wrong-token")
	yml := testinfra.DaemonConfig(t, "http://"+testinfra.FreeAddr(t)) + `alerts:
  kind: slack
  slack:
    token:
      env: VIGIL_TEST_REFUSED_TOKEN
    channel: "#oncall"
    api_url: ` + st.GetAPIURL() + "\n"
	code, stderr := runVigil(t, yml, 20*time.Second)
	if code != exitFail || !strings.Contains(stderr, "vigil cannot start") || !strings.Contains(stderr, "VIGIL_TEST_REFUSED_TOKEN") {
		t.Fatalf("exit %d, want %d with the token's source named:\n%s", code, exitFail, stderr)
	}
	if strings.Contains(stderr, "xoxb-wrong-token") {
		t.Fatal("the token leaked into the error")
	}
}

// Issue #24: vigil sits in the data path, so a state directory it cannot
// write at start must not take the proxy down (systemd would restart it
// every 5 s with no client reaching the engine). The proxy serves, the
// reason is paged, and restarts are refused: a journaled step cannot run.
func TestAStateDirectoryThatCannotBeWrittenKeepsTheProxyServingAndRefusesRestarts(t *testing.T) {
	s := simengine.Start(t, nil)
	yml := replaceLine(testinfra.DaemonConfig(t, s.URL()), "  state_file: ", "  state_file: /proc/vigil/state.json")
	td := startDaemon(t, yml)
	resp, err := http.Post(td.proxyURL+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":"hi","max_tokens":2}`))
	if err != nil {
		t.Fatalf("the proxy does not serve with an unwritable state directory: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("completion through the proxy: %d", resp.StatusCode)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(td.logs.String(), "STATE NOT WRITABLE, RESTARTS REFUSED") {
		if time.Now().After(deadline) {
			t.Fatalf("no page says restarts are refused:\n%s", td.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(td.logs.String(), "/proc/vigil/state.json") {
		t.Errorf("the page does not name the state file:\n%s", td.logs.String())
	}
	select {
	case err := <-td.done:
		t.Fatalf("the daemon stopped: %v", err)
	default:
	}
}
