package configs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func TestShippedSamplesLoad(t *testing.T) {
	for _, name := range []string{"vigil.yaml", "example.yaml"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := Parse(data, now)
			if err != nil {
				t.Fatalf("shipped sample %s does not load:\n%v", name, err)
			}
			if cfg.Engine.URL != "http://127.0.0.1:8000" {
				t.Errorf("engine.url = %q", cfg.Engine.URL)
			}
		})
	}
}

func TestExampleSpellsOutTheDefaults(t *testing.T) {
	data, _ := os.ReadFile("example.yaml")
	cfg, err := Parse(data, now)
	if err != nil {
		t.Fatal(err)
	}
	def := Default()
	cfg.Node, def.Node = "", ""
	if got, want := cfg.Redacted(), def.Redacted(); got != want {
		t.Errorf("example.yaml drifted from the defaults:\n--- example\n%s\n--- defaults\n%s", got, want)
	}
}

func TestInvalidConfigsNameKeyAndLine(t *testing.T) {
	cases := []struct {
		file string
		want string
	}{
		{"unknown-key", `watchdog.hang_afer (line 4): unknown key (did you mean "hang_after"?)`},
		{"wrong-type", "watchdog.saturated_waiting (line 3): cannot unmarshal string `lots` into int"},
		{"bare-duration", "watchdog.interval (line 2): 15 is a bare number; write a duration with a unit, e.g. 15s"},
		{"hang-after", "watchdog.hang_after (line 3): must be > interval (15s)"},
		{"engine-url", `engine.url (line 2): scheme must be http or https, got "ftp"`},
		{"lb-kind", `load_balancer.kind (line 2): must be one of haproxy, http, none; got "nginx"`},
		{"haproxy-server", "load_balancer.haproxy.server (line 3): is required"},
		{"docker-container", "restart.docker.container (line 1): is required"},
		{"ramp", "load_balancer.ramp_weights (line 2): must end at 100"},
		{"slack-token", "alerts.slack.token (line 3): file or env is required when kind is slack"},
		{"secret-both", "engine.api_key (line 2): set file or env, not both"},
		{"admission-order", `admission.order (line 2): must be fifo or newest_first; got "lifo"`},
		{"override-reason", "overrides[0] (line 2): reason is required: say why, so the next operator knows"},
		{"not-mapping", "watchdog (line 1): must be a mapping of keys"},
		{"yaml-syntax", "(file) (line 3): found character that cannot start any token"},
		{"digest", `alerts.digest (line 2): not a cron schedule: expected exactly 5 fields, found 2: [every day]`},
		{"pool-coordination", `pool.coordination (line 3): must be none or etcd; got "zookeeper"`},
		{"pool-lease", "pool.etcd.lease_ttl (line 5): must be >= 2s (etcd's minimum lease); got 1s"},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "invalid-"+tc.file+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(data, now)
			if err == nil {
				t.Fatalf("config loaded; want error %q", tc.want)
			}
			if got := strings.Split(err.Error(), "\n")[0]; got != tc.want {
				t.Errorf("error:\n got  %s\n want %s", got, tc.want)
			}
		})
	}
}

func TestEveryInvalidFixtureHasACase(t *testing.T) {
	files, _ := filepath.Glob("testdata/invalid-*.yaml")
	if len(files) != 18 {
		t.Errorf("found %d invalid fixtures; add a case to TestInvalidConfigsNameKeyAndLine for each", len(files))
	}
}

func TestSecretsComeFromFileOrEnvAndNeverPrint(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	os.WriteFile(keyFile, []byte("sk-engine-secret\n"), 0o600)
	t.Setenv("VIGIL_TEST_SLACK", "xoxb-slack-secret")
	yml := "engine:\n  api_key:\n    file: " + keyFile + "\nalerts:\n  kind: slack\n  slack:\n    channel: C1\n    token:\n      env: VIGIL_TEST_SLACK\n"
	cfg, err := Parse([]byte(yml), now)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Engine.APIKey.Value() != "sk-engine-secret" || cfg.Alerts.Slack.Token.Value() != "xoxb-slack-secret" {
		t.Fatalf("secrets not resolved: %q %q", cfg.Engine.APIKey.Value(), cfg.Alerts.Slack.Token.Value())
	}
	for _, s := range []string{cfg.Redacted(), cfg.Engine.APIKey.String(), strings.Join([]string{
		fmtAll(cfg.Engine.APIKey), fmtAll(cfg.Alerts.Slack.Token), fmtAll(cfg)}, " ")} {
		if strings.Contains(s, "secret") && strings.Contains(s, "sk-engine") || strings.Contains(s, "xoxb-slack") {
			t.Fatalf("a secret leaked into printed output: %s", s)
		}
	}
}

func TestMissingSecretFileIsAConfigError(t *testing.T) {
	_, err := Parse([]byte("engine:\n  api_key:\n    file: /nonexistent/key\n"), now)
	if err == nil || !strings.HasPrefix(err.Error(), "engine.api_key (line 2): read secret file:") {
		t.Fatalf("err = %v", err)
	}
}

func TestExpiredOverrideIsIgnoredWithAWarning(t *testing.T) {
	yml := "overrides:\n  - key: admission.max_in_flight\n    value: \"64\"\n    until: 2026-01-01T00:00:00Z\n    reason: load test\n"
	cfg, err := Parse([]byte(yml), now)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], "overrides[0] (line 2): expired at 2026-01-01T00:00:00Z; ignored") {
		t.Fatalf("warnings = %v", cfg.Warnings)
	}
}

func TestValidateOverride(t *testing.T) {
	ok := Override{Key: "admission.max_in_flight", Value: "64", Until: now.Add(time.Hour), Reason: "load test"}
	cases := []struct {
		name string
		edit func(*Override)
		want string
	}{
		{"a complete override is accepted", func(*Override) {}, ""},
		{"an override without until is rejected", func(o *Override) { o.Until = time.Time{} }, "until is required"},
		{"an override without a reason is rejected", func(o *Override) { o.Reason = "" }, "reason is required"},
		{"an override beyond seven days is rejected", func(o *Override) { o.Until = now.Add(8 * 24 * time.Hour) }, "more than 168h0m0s away"},
		{"an unknown key is rejected", func(o *Override) { o.Key = "engine.url" }, `key "engine.url" cannot be overridden`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.edit(&o)
			err := ValidateOverride(o, now)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("ValidateOverride = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestAllErrorsAreReportedInFileOrder(t *testing.T) {
	_, err := Parse([]byte("watchdog:\n  saturated_waiting: 0\n  down_after: 0\n"), now)
	es, ok := err.(Errors)
	if !ok || len(es) != 2 || es[0].Line != 2 || es[1].Line != 3 {
		t.Fatalf("err = %#v", err)
	}
}

func fmtAll(v any) string { return fmt.Sprintf("%v %+v %#v %s", v, v, v, v) }
