package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/configs"
)

// gpuConfig is the config of instance n of an eight-engine node, as
// docs/integrations.md ("Several engines on a node") writes it but
// for the agent (agentConfig adds it).
func gpuConfig(n int) string {
	return fmt.Sprintf(`node: node-a-gpu%d
engine:
  url: http://127.0.0.1:%d
admission:
  listen: 127.0.0.1:%d
status:
  listen: 127.0.0.1:%d
restart:
  kind: docker
  docker:
    container: vllm-gpu%d
`, n, 8000+n, 8100+n, 9200+n, n)
}

func agentConfig(n int) string {
	return gpuConfig(n) + fmt.Sprintf("load_balancer:\n  kind: agent\n  agent:\n    listen: 0.0.0.0:%d\n", 9300+n)
}

func TestCheckConfigOfTheREADMEsEightEngineNode(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for n := range 8 {
		p := filepath.Join(dir, fmt.Sprintf("gpu%d.yaml", n))
		if err := os.WriteFile(p, []byte(agentConfig(n)), 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	code, out, errOut := vigil(t, append([]string{"check-config"}, paths...)...)
	if code != exitOK || !strings.Contains(out, "8 instances: no shared port, state file or engine") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	// The agent listens on every address: another instance's status port
	// equal to its port is taken, whatever address it names.
	if err := os.WriteFile(paths[7], []byte(strings.Replace(agentConfig(7), "127.0.0.1:9207", "127.0.0.1:9303", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = vigil(t, append([]string{"check-config"}, paths...)...)
	if code != exitUsage || !strings.Contains(errOut, "gpu3 (") || !strings.Contains(errOut, "load_balancer.agent.listen and gpu7 (") {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
}

func TestCheckConfigOfSeveralInstancesRefusesWhatTheyShare(t *testing.T) {
	cases := []struct {
		name  string
		gpu1  func(string) string // edits instance 1's config
		code  int
		wants []string
	}{
		{"eight-engine layout: nothing shared", func(y string) string { return y }, exitOK,
			[]string{"2 instances: no shared port, state file or engine"}},
		{"the same status port", func(y string) string { return strings.Replace(y, "127.0.0.1:9201", "127.0.0.1:9200", 1) },
			exitUsage, []string{"gpu0 (", "status.listen and gpu1 (", "status.listen 127.0.0.1:9200: the same port"}},
		{"an admission port on every address takes the other's loopback port",
			func(y string) string {
				return strings.Replace(y, "  listen: 127.0.0.1:8101\n", "  listen: 0.0.0.0:8100\n  allow_remote: true\n", 1)
			}, exitUsage, []string{"admission.listen", "the same port"}},
		{"status left at its default in both", func(y string) string { return strings.Replace(y, "  listen: 127.0.0.1:9201\n", "", 1) },
			exitOK, nil}, // gpu0 sets 9200, gpu1 takes 9108: distinct
		{"the same container", func(y string) string { return strings.Replace(y, "vllm-gpu1", "vllm-gpu0", 1) },
			exitUsage, []string{"share restart.docker.container: both would restart container vllm-gpu0 on unix:///var/run/docker.sock"}},
		{"the same state file written in both", func(y string) string {
			return y + "watchdog:\n  state_file: /var/lib/vigil/gpu0/state.json\n"
		}, exitUsage, []string{"share watchdog.state_file /var/lib/vigil/gpu0/state.json"}},
		{"an agent port beside another's status port", func(y string) string {
			return y + "load_balancer:\n  kind: agent\n  agent:\n    listen: 127.0.0.1:9200\n"
		}, exitUsage, []string{"load_balancer.agent.listen", "the same port"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p0, p1 := filepath.Join(dir, "gpu0.yaml"), filepath.Join(dir, "gpu1.yaml")
			if err := os.WriteFile(p0, []byte(gpuConfig(0)), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p1, []byte(tc.gpu1(gpuConfig(1))), 0o600); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := vigil(t, "check-config", p0, p1)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			for _, w := range tc.wants {
				if !strings.Contains(out+errOut, w) {
					t.Errorf("output lacks %q:\n%s%s", w, out, errOut)
				}
			}
		})
	}
}

func TestEachInstanceKeepsItsStateInItsOwnStateDirectory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpu3.yaml")
	if err := os.WriteFile(path, []byte(gpuConfig(3)), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "STATE_DIRECTORY" {
				return v
			}
			return ""
		}
	}
	for _, tc := range []struct{ env, want string }{
		{"/var/lib/vigil/gpu3", "/var/lib/vigil/gpu3/state.json"},
		{"/var/lib/vigil/gpu3:/var/lib/other", "/var/lib/vigil/gpu3/state.json"},
		{"", "/var/lib/vigil/state.json"},
	} {
		cfg, err := configs.LoadEnv(path, env(tc.env))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Watchdog.StateFile != tc.want {
			t.Errorf("STATE_DIRECTORY=%q: state file %s, want %s", tc.env, cfg.Watchdog.StateFile, tc.want)
		}
	}
	// A state file the config names wins over the unit's directory.
	if err := os.WriteFile(path, []byte(gpuConfig(3)+"watchdog:\n  state_file: "+dir+"/s.json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := configs.LoadEnv(path, env("/var/lib/vigil/gpu3"))
	if err != nil || cfg.Watchdog.StateFile != dir+"/s.json" {
		t.Fatalf("state file %v, %v", cfg.Watchdog.StateFile, err)
	}
}
