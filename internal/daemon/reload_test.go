package daemon

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"

	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/internal/testinfra/simengine"
)

// statusConfig is /status's "config" part.
type statusConfig struct {
	InForce struct {
		Watchdog struct {
			HangAfter        string `json:"hang_after"`
			SaturatedWaiting int    `json:"saturated_waiting"`
			ProbeSLO         string `json:"probe_slo"`
			DownAfter        int    `json:"down_after"`
			Interval         string `json:"interval"`
			DryRun           bool   `json:"dry_run"`
		} `json:"watchdog"`
		Admission struct {
			MaxInFlight int `json:"max_in_flight"`
		} `json:"admission"`
		Status struct {
			Listen string `json:"listen"`
		} `json:"status"`
	} `json:"in_force"`
	PendingRestart []string `json:"pending_restart"`
	Overridden     []string `json:"overridden"`
}

func (td *testDaemon) statusDoc(t *testing.T) (doc struct {
	DryRun    bool             `json:"dry_run"`
	Config    *statusConfig    `json:"config"`
	Overrides []map[string]any `json:"overrides"`
}) {
	t.Helper()
	if err := json.Unmarshal([]byte(getBody(t, td.statusURL+"/status")), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Config == nil {
		t.Fatal("/status does not show the config in force")
	}
	return doc
}

// rewrite writes the daemon's config file with each old→new replacement.
func (td *testDaemon) rewrite(t *testing.T, pairs ...string) {
	t.Helper()
	yml := td.configYAML
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(yml, pairs[i]) {
			t.Fatalf("config has no %q", pairs[i])
		}
		yml = strings.Replace(yml, pairs[i], pairs[i+1], 1)
	}
	if err := os.WriteFile(td.cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestSIGHUPAppliesLiveKeysAndNamesTheRest(t *testing.T) {
	cases := []struct {
		name     string
		edit     func(td *testDaemon) []string // old, new, old, new...
		check    func(t *testing.T, td *testDaemon, c *statusConfig, dryRun bool)
		wantLogs []string
		notLogs  []string
	}{
		{"thresholds and the cap apply at once",
			func(*testDaemon) []string {
				return []string{"hang_after: 2s", "hang_after: 4s", "probe_slo: 500ms", "probe_slo: 800ms",
					"  state_file:", "  down_after: 5\n  saturated_waiting: 3\n  state_file:",
					"admission:\n", "admission:\n  max_in_flight: 7\n"}
			},
			func(t *testing.T, td *testDaemon, c *statusConfig, _ bool) {
				th := td.d.watchdog.Thresholds()
				if th.HangAfter != 4*time.Second || th.ProbeSLO != 800*time.Millisecond || th.DownAfter != 5 || th.SaturatedWaiting != 3 {
					t.Errorf("thresholds in force = %+v", th)
				}
				if got := td.d.limiter.MaxInFlight(); got != 7 {
					t.Errorf("cap = %d, want 7", got)
				}
				w := c.InForce.Watchdog
				if w.HangAfter != "4s" || w.ProbeSLO != "800ms" || w.DownAfter != 5 || w.SaturatedWaiting != 3 || c.InForce.Admission.MaxInFlight != 7 {
					t.Errorf("/status config in force = %+v", c.InForce)
				}
				if len(c.PendingRestart) != 0 {
					t.Errorf("pending restart = %v, want none", c.PendingRestart)
				}
			},
			[]string{"watchdog.down_after changed: applied", "watchdog.hang_after changed: applied", "config reloaded and applied"},
			[]string{"needs a restart"}},
		{"a runbook link applies at once and shows on the page",
			func(td *testDaemon) []string {
				listen := "status:\n  listen: " + strings.TrimPrefix(td.statusURL, "http://")
				return []string{listen, listen + "\n  runbook_url: https://wiki.example.com/runbooks/vigil"}
			},
			func(t *testing.T, td *testDaemon, c *statusConfig, _ bool) {
				if len(c.PendingRestart) != 0 {
					t.Errorf("pending restart = %v, want none", c.PendingRestart)
				}
				if page := getBody(t, td.statusURL+"/"); !strings.Contains(page, `href="https://wiki.example.com/runbooks/vigil"`) {
					t.Error("the status page has no runbook link after the reload")
				}
			},
			[]string{"status.runbook_url changed: applied", "config reloaded and applied"},
			[]string{"needs a restart"}},
		{"dry_run, interval and a listener need a restart and keep their old values",
			func(td *testDaemon) []string {
				return []string{"  state_file:", "  dry_run: true\n  state_file:", "interval: 200ms", "interval: 300ms",
					"status:\n  listen: " + strings.TrimPrefix(td.statusURL, "http://"), "status:\n  listen: 127.0.0.1:1"}
			},
			func(t *testing.T, td *testDaemon, c *statusConfig, dryRun bool) {
				if dryRun || c.InForce.Watchdog.DryRun {
					t.Error("/status says dry run, but recovery still acts for real")
				}
				if c.InForce.Watchdog.Interval != "200ms" || c.InForce.Status.Listen == "127.0.0.1:1" {
					t.Errorf("/status shows values not in force: %+v", c.InForce)
				}
				want := "[watchdog.interval watchdog.dry_run status.listen]"
				if got := strings.Join(c.PendingRestart, " "); "["+got+"]" != want {
					t.Errorf("pending restart = %v, want %s", c.PendingRestart, want)
				}
			},
			[]string{"watchdog.dry_run changed: needs a restart (systemctl restart vigil); still running with the old value",
				"watchdog.interval changed: needs a restart", "status.listen changed: needs a restart",
				"some changes are NOT in force"},
			[]string{"config reloaded and applied"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := simengine.Start(t, nil)
			td := startDaemon(t, testinfra.DaemonConfig(t, s.URL()))
			td.rewrite(t, tc.edit(td)...)
			td.d.reload(td.cfgPath, false)
			doc := td.statusDoc(t)
			tc.check(t, td, doc.Config, doc.DryRun)
			checkLogs(t, td.logs.String(), tc.wantLogs, tc.notLogs)
		})
	}
}

func TestSIGHUPKeepsLiveOverrides(t *testing.T) {
	s := simengine.Start(t, nil)
	td := startDaemon(t, testinfra.DaemonConfig(t, s.URL()))
	getBody(t, td.statusURL+"/healthz")
	if err := td.d.overrides.Set(configs.Override{Key: "watchdog.hang_after", Value: "5s",
		Until: time.Now().Add(time.Hour), Reason: "long prefills OPS-9"}); err != nil {
		t.Fatal(err)
	}
	hangAfter := func() time.Duration { return td.d.watchdog.Thresholds().HangAfter }

	// An unchanged file: the override stays in force and listed.
	td.d.reload(td.cfgPath, false)
	if got := hangAfter(); got != 5*time.Second {
		t.Fatalf("hang_after after reloading an unchanged file = %s, want the override's 5s", got)
	}
	doc := td.statusDoc(t)
	if len(doc.Overrides) != 1 || doc.Config.InForce.Watchdog.HangAfter != "5s" || strings.Join(doc.Config.Overridden, ",") != "watchdog.hang_after" {
		t.Fatalf("/status after the reload: overrides %v, config %+v", doc.Overrides, doc.Config)
	}

	// The file changes the same key: the override still holds it; the
	// file's value is what comes back when it ends.
	td.rewrite(t, "hang_after: 2s", "hang_after: 3s")
	td.d.reload(td.cfgPath, false)
	if got := hangAfter(); got != 5*time.Second {
		t.Fatalf("hang_after after the file changed it = %s, want the override's 5s", got)
	}
	if !strings.Contains(td.logs.String(), "watchdog.hang_after changed, but an override holds it until") {
		t.Fatalf("the held change is not explained:\n%s", td.logs.String())
	}
	if _, err := td.d.overrides.Clear("watchdog.hang_after"); err != nil {
		t.Fatal(err)
	}
	if got := hangAfter(); got != 3*time.Second {
		t.Fatalf("hang_after after clearing the override = %s, want the file's new 3s", got)
	}
}

func TestSIGHUPAppliesOverridesAddedToTheFile(t *testing.T) {
	s := simengine.Start(t, nil)
	td := startDaemon(t, testinfra.DaemonConfig(t, s.URL()))
	getBody(t, td.statusURL+"/healthz")
	until := time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
	td.configYAML += "overrides:\n  - key: watchdog.saturated_waiting\n    value: \"12\"\n    until: " + until + "\n    reason: batch night OPS-4\n"
	td.rewrite(t)
	td.d.reload(td.cfgPath, false)
	if got := td.d.watchdog.Thresholds().SaturatedWaiting; got != 12 {
		t.Fatalf("saturated_waiting = %d, want the file override's 12", got)
	}
	list := td.d.overrides.List()
	if len(list) != 1 || list[0].Source != "config" || list[0].Reason != "batch night OPS-4" {
		t.Fatalf("overrides = %+v", list)
	}

	// A wrong value in the file is refused with its key and reason, and
	// nothing else in the file is taken either.
	td.configYAML = strings.Replace(td.configYAML, `value: "12"`, `value: "many"`, 1)
	td.rewrite(t, "hang_after: 2s", "hang_after: 4s")
	td.d.reload(td.cfgPath, false)
	if !strings.Contains(td.logs.String(), `overrides[0].value (line`) || td.d.watchdog.Thresholds().HangAfter != 2*time.Second {
		t.Fatalf("a bad override in the file: hang_after %s, logs:\n%s", td.d.watchdog.Thresholds().HangAfter, td.logs.String())
	}
}

// The reload's other outcomes, each named in the log as an operator would
// read it after `systemctl reload vigil`.
func TestSIGHUPRefusalsAndNoChange(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "engine.key")
	if err := os.WriteFile(keyFile, []byte("sk-first-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		yml  func(base string) string // the config the daemon starts with
		edit func(t *testing.T, td *testDaemon)
		// check runs after the reload.
		check    func(t *testing.T, td *testDaemon, c *statusConfig)
		wantLogs []string
		notLogs  []string
	}{
		{"probe_slo above the probe_timeout in force is not applied; probe_timeout waits for a restart",
			func(base string) string { return base },
			func(t *testing.T, td *testDaemon) {
				td.rewrite(t, "probe_timeout: 1s", "probe_timeout: 3s", "probe_slo: 500ms", "probe_slo: 2s")
			},
			func(t *testing.T, td *testDaemon, c *statusConfig) {
				if got := td.d.watchdog.Thresholds().ProbeSLO; got != 500*time.Millisecond {
					t.Errorf("probe_slo in force = %s, want the old 500ms", got)
				}
				if c.InForce.Watchdog.ProbeSLO != "500ms" {
					t.Errorf("/status shows probe_slo %s, which is not in force", c.InForce.Watchdog.ProbeSLO)
				}
				if got := strings.Join(c.PendingRestart, " "); got != "watchdog.probe_timeout" {
					t.Errorf("pending restart = %q, want watchdog.probe_timeout", got)
				}
			},
			[]string{"watchdog.probe_slo changed but was not applied; still running with the old value",
				"must be <= the probe_timeout in force (1s)", "watchdog.probe_timeout changed: needs a restart",
				"some changes are NOT in force"},
			[]string{"config reloaded and applied"}},
		{"max_in_flight with the limiter off needs a restart (nothing runs to take it)",
			func(base string) string {
				return strings.Replace(base, "admission:\n", "admission:\n  enabled: false\n", 1)
			},
			func(t *testing.T, td *testDaemon) {
				td.rewrite(t, "admission:\n", "admission:\n  max_in_flight: 9\n")
			},
			func(t *testing.T, td *testDaemon, c *statusConfig) {
				if td.d.limiter != nil {
					t.Fatal("the reload started a limiter")
				}
				if got := strings.Join(c.PendingRestart, " "); got != "admission.max_in_flight" {
					t.Errorf("pending restart = %q, want admission.max_in_flight", got)
				}
			},
			[]string{"admission.max_in_flight changed: needs a restart"},
			[]string{"admission.max_in_flight changed: applied"}},
		{"a secret file holding another key is named, never shown",
			func(base string) string {
				return strings.Replace(base, "  request_timeout: 1s\n", "  request_timeout: 1s\n  api_key:\n    file: "+keyFile+"\n", 1)
			},
			func(t *testing.T, td *testDaemon) {
				if err := os.WriteFile(keyFile, []byte("sk-second-key\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			func(t *testing.T, td *testDaemon, c *statusConfig) {
				if got := strings.Join(c.PendingRestart, " "); got != "engine.api_key" {
					t.Errorf("pending restart = %q, want engine.api_key", got)
				}
			},
			[]string{"engine.api_key changed: needs a restart"},
			[]string{"sk-first-key", "sk-second-key"}},
		{"an unchanged file says so",
			func(base string) string { return base },
			func(t *testing.T, td *testDaemon) { td.rewrite(t) },
			func(t *testing.T, td *testDaemon, c *statusConfig) {
				if len(c.PendingRestart) != 0 {
					t.Errorf("pending restart = %v, want none", c.PendingRestart)
				}
			},
			[]string{"config reloaded; no setting changed"},
			[]string{"needs a restart", "config reloaded and applied"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := simengine.Start(t, nil)
			td := startDaemon(t, tc.yml(testinfra.DaemonConfig(t, s.URL())))
			tc.edit(t, td)
			td.d.reload(td.cfgPath, false)
			tc.check(t, td, td.statusDoc(t).Config)
			checkLogs(t, td.logs.String(), tc.wantLogs, tc.notLogs)
		})
	}
}

// checkLogs wants each of want in logs and none of not.
func checkLogs(t *testing.T, logs string, want, not []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(logs, w) {
			t.Errorf("logs lack %q", w)
		}
	}
	for _, w := range not {
		if strings.Contains(logs, w) {
			t.Errorf("logs say %q", w)
		}
	}
	if t.Failed() {
		t.Logf("logs:\n%s", logs)
	}
}
