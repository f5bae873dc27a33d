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

// invalidCases: one testdata/invalid-NAME.yaml per rule, with the first
// line of its error exactly.
var invalidCases = []struct {
	file string
	want string
}{
	{"unknown-key", `watchdog.hang_afer (line 4): unknown key (did you mean "hang_after"?)`},
	{"wrong-type", "watchdog.saturated_waiting (line 3): cannot unmarshal string `lots` into int"},
	{"bare-duration", "watchdog.interval (line 2): 15 is a bare number; write a duration with a unit, e.g. 15s"},
	{"hang-after", "watchdog.hang_after (line 3): must be > interval (15s), or auto"},
	{"hang-after-zero", "watchdog.hang_after (line 3): must be > 0, or auto"},
	{"hang-after-min", "watchdog.hang_after_min (line 4): must be >= interval (15s)"},
	{"engine-url", `engine.url (line 2): scheme must be http or https, got "ftp"`},
	{"engine-url-missing", "engine.url: is required: the engine's base URL, e.g. http://127.0.0.1:8000"},
	{"empty", "(file): is empty: at least engine.url is required"},
	{"comments-only", "(file): is empty: at least engine.url is required"},
	{"lb-kind", `load_balancer.kind (line 2): must be one of haproxy, http, healthcheck, agent, none; got "nginx"`},
	{"haproxy-server", "load_balancer.haproxy.server (line 3): is required"},
	{"docker-container", "restart.docker.container (line 1): is required"},
	{"ramp", "load_balancer.ramp_weights (line 2): must end at 100"},
	{"slack-token", "alerts.slack.token (line 3): file or env is required when kind is slack"},
	{"secret-both", "engine.api_key (line 2): set file or env, not both"},
	{"admission-order", `admission.order (line 2): must be fifo or newest_first; got "lifo"`},
	{"admission-client-timeouts", `admission.client_timeouts[0].path (line 3): must be a request path starting with /, ` +
		`e.g. /v1/chat/completions; got "v1/completions"`},
	{"admission-stream-queue-wait", "admission.stream_queue_wait (line 2): must be >= 0 (0 = ttft_target less the engine's time to first token, or 10s without a target)"},
	{"admission-ttft-target", "admission.ttft_target (line 3): must be >= 0 (0 = no latency objective), or auto"},
	{"status-runbook-credentials", "status.runbook_url (line 4): must not carry credentials (user:password@): the status page shows it"},
	{"status-runbook", `status.runbook_url (line 4): must be an http(s) URL, got "wiki/vllm-hung"`},
	{"status-remote", "status.listen (line 4): 0.0.0.0:9108 is not a loopback address: " +
		"the override API changes limits without authentication; bind it to 127.0.0.1 or set status.allow_remote: true"},
	{"admission-remote", "admission.listen (line 4): :8001 is not a loopback address: " +
		"the proxy lets every client that reaches it use the engine (with its API key injected); " +
		"bind it to 127.0.0.1 or set admission.allow_remote: true"},
	{"override-reason", "overrides[0].reason (line 2): reason is required: say why, so the next operator knows"},
	{"override-value", `overrides[0].value (line 5): value "lots" for watchdog.hang_after: want a positive duration such as 90s or 5m, or auto`},
	{"override-until", `overrides[0].until (line 6): "tomorrow" is not an RFC 3339 time such as 2026-12-01T09:00:00Z`},
	{"override-hang-after", "overrides[0].value (line 5): watchdog.hang_after 4s must be > watchdog.interval (5s)"},
	{"healthcheck-listen", `load_balancer.healthcheck.listen (line 6): port must be 1..65535 (the balancer is told it), got "0"`},
	{"healthcheck-path", `load_balancer.healthcheck.path (line 6): must start with /, got "ready"`},
	{"agent-expect-polls", "load_balancer.agent.expect_polls (line 6): must be >= 0 (0: do not wait for the pollers)"},
	{"haproxy-socket-and-sockets", "load_balancer.haproxy.sockets (line 7): set socket or sockets, not both"},
	{"haproxy-sockets", `load_balancer.haproxy.sockets[1] (line 8): must be unix:///path, /path or tcp://host:port, got "http://10.0.0.2:9999"`},
	{"agent-listen", "load_balancer.agent.listen (line 6): must be host:port: address 9112: missing port in address"},
	{"agent-expect-within", "load_balancer.agent.expect_within (line 7): must be > 0"},
	{"engine-kind", `engine.kind (line 3): must be one of auto, vllm, sglang, llamacpp; got "tgi"`},
	{"not-mapping", "watchdog (line 1): must be a mapping of keys"},
	{"yaml-syntax", "(file) (line 3): found character that cannot start any token"},
	{"digest", `alerts.digest (line 2): not a cron schedule: expected exactly 5 fields, found 2: [every day]`},
	{"pool-coordination", `pool.coordination (line 3): must be none or etcd; got "zookeeper"`},
	{"pool-lease", "pool.etcd.lease_ttl (line 5): must be >= 2s (etcd's minimum lease); got 1s"},
}

func TestInvalidConfigsNameKeyAndLine(t *testing.T) {
	for _, tc := range invalidCases {
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
	if len(files) != len(invalidCases) {
		t.Errorf("found %d invalid fixtures and %d cases; add a case to invalidCases for each", len(files), len(invalidCases))
	}
}

func TestRemoteListenersNeedAllowRemote(t *testing.T) {
	cases := []struct {
		name string
		yml  string
		want string // "" = loads
	}{
		{"loopback IPv4", "status:\n  listen: 127.0.0.1:9108\n", ""},
		{"loopback IPv6", "status:\n  listen: \"[::1]:9108\"\n", ""},
		{"localhost", "admission:\n  listen: localhost:8001\n", ""},
		{"status disabled", "status:\n  listen: \"\"\n", ""},
		{"status on every interface, allowed", "status:\n  listen: 0.0.0.0:9108\n  allow_remote: true\n", ""},
		{"admission on a LAN address, allowed", "admission:\n  listen: 10.0.0.5:8001\n  allow_remote: true\n", ""},
		{"admission off: its listen is not checked", "admission:\n  enabled: false\n  listen: 0.0.0.0:8001\n", ""},
		{"status on a LAN address", "status:\n  listen: 10.0.0.5:9108\n", "status.listen (line 4): 10.0.0.5:9108 is not a loopback address"},
		{"status on a host name", "status:\n  listen: gpu-node-1:9108\n", "set status.allow_remote: true"},
		{"allow_remote on the wrong section", "status:\n  allow_remote: true\nadmission:\n  listen: 0.0.0.0:8001\n",
			"admission.listen (line 6): 0.0.0.0:8001 is not a loopback address"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte("engine:\n  url: http://127.0.0.1:8000\n"+tc.yml), now)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestOverrideValuesAreTypeChecked(t *testing.T) {
	ok := Override{Until: now.Add(time.Hour), Reason: "r"}
	cases := []struct {
		key, value string
		valid      bool
	}{
		{"admission.max_in_flight", "64", true},
		{"admission.max_in_flight", "0", true},
		{"admission.max_in_flight", "-1", false},
		{"admission.max_in_flight", "64x", false},
		{"watchdog.hang_after", "5m", true},
		{"watchdog.hang_after", "300", false},
		{"watchdog.hang_after", "5 minutes", false},
		{"watchdog.saturated_waiting", "16", true},
		{"watchdog.saturated_waiting", "0", false},
		{"watchdog.saturated_waiting", "true", false},
	}
	for _, tc := range cases {
		o := ok
		o.Key, o.Value = tc.key, tc.value
		err := ValidateOverride(o, now)
		if (err == nil) != tc.valid || err != nil && !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s=%s: err = %v, want valid=%v (naming the key)", tc.key, tc.value, err, tc.valid)
		}
	}
}

// ttft_target takes auto (the default: derived from the engine), a
// duration, or 0 for no objective; auto is no duration a file could write
// by accident.
func TestTTFTTargetIsAutoADurationOrNone(t *testing.T) {
	for _, tc := range []struct {
		yml  string
		want AutoDuration
	}{
		{"", Automatic()},
		{"admission:\n  ttft_target: auto\n", Automatic()},
		{"admission:\n  ttft_target: 700ms\n", Fixed(700 * time.Millisecond)},
		{"admission:\n  ttft_target: 0s\n", Fixed(0)},
	} {
		cfg, err := Parse([]byte("engine:\n  url: http://127.0.0.1:8000\n"+tc.yml), now)
		if err != nil {
			t.Fatalf("%q: %v", tc.yml, err)
		}
		if got := cfg.Admission.TTFTTarget; got != tc.want {
			t.Errorf("%q: ttft_target %v, want %v", tc.yml, got, tc.want)
		}
	}
}

func TestUnquotedTimestampUntilIsAccepted(t *testing.T) {
	yml := "engine:\n  url: http://127.0.0.1:8000\noverrides:\n  - key: admission.max_in_flight\n    value: 64\n    until: 2026-12-01 09:00:00\n    reason: r\n"
	cfg, err := Parse([]byte(yml), now)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Overrides[0]; got.Value != "64" || !got.Until.Equal(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)) {
		t.Fatalf("override = %+v", got)
	}
}

func TestSecretsComeFromFileOrEnvAndNeverPrint(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	os.WriteFile(keyFile, []byte("sk-engine-secret\n"), 0o600)
	t.Setenv("VIGIL_TEST_SLACK", "xoxb-slack-secret")
	yml := "engine:\n  url: http://127.0.0.1:8000\n  api_key:\n    file: " + keyFile + "\nalerts:\n  kind: slack\n  slack:\n    channel: C1\n    token:\n      env: VIGIL_TEST_SLACK\n"
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
	_, err := Parse([]byte("engine:\n  url: http://127.0.0.1:8000\n  api_key:\n    file: /nonexistent/key\n"), now)
	if err == nil || !strings.HasPrefix(err.Error(), "engine.api_key (line 3): read secret file:") {
		t.Fatalf("err = %v", err)
	}
}

func TestExpiredOverrideIsIgnoredWithAWarning(t *testing.T) {
	yml := "engine:\n  url: http://127.0.0.1:8000\noverrides:\n  - key: admission.max_in_flight\n    value: \"64\"\n    until: 2026-01-01T00:00:00Z\n    reason: load test\n"
	cfg, err := Parse([]byte(yml), now)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], "overrides[0] (line 4): expired at 2026-01-01T00:00:00Z; ignored") {
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
	// Keys absent from the file (engine.url here) come after the rest.
	if !ok || len(es) != 3 || es[0].Line != 2 || es[1].Line != 3 || es[2].Path != "engine.url" {
		t.Fatalf("err = %#v", err)
	}
}

func fmtAll(v any) string { return fmt.Sprintf("%v %+v %#v %s", v, v, v, v) }

func TestAnExpiredOverrideWithAWrongValueIsStillAnError(t *testing.T) {
	yml := "engine:\n  url: http://127.0.0.1:8000\noverrides:\n  - key: watchdog.saturated_waiting\n    value: lots\n    until: 2026-01-01T00:00:00Z\n    reason: r\n"
	_, err := Parse([]byte(yml), now)
	if err == nil || !strings.HasPrefix(err.Error(), `overrides[0].value (line 5): value "lots" for watchdog.saturated_waiting`) {
		t.Fatalf("err = %v", err)
	}
}
