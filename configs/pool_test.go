package configs

import (
	"os"
	"strings"
	"testing"
)

const etcdPool = "pool:\n  coordination: etcd\n  etcd:\n    endpoints: [http://127.0.0.1:2379]\n"

// What a vigil registers for its peers, and what the config says about it.
func TestPoolRegistration(t *testing.T) {
	host, _ := os.Hostname()
	cases := []struct {
		name    string
		yml     string
		url     string // PoolStatusURL
		err     string // "" = loads
		warning string // "" = no warning about pool.status_url
	}{
		{"default: from the loopback status listener, with a warning", etcdPool,
			"http://127.0.0.1:9108/status", "", "pool.status_url (line 3): unset, so this vigil registers http://127.0.0.1:9108/status, which only this host can reach"},
		{"set explicitly", etcdPool + "  status_url: http://10.0.0.11:9108/status\n", "http://10.0.0.11:9108/status", "", ""},
		{"every interface: this host's name", etcdPool + "status:\n  listen: 0.0.0.0:9200\n  allow_remote: true\n",
			"http://" + host + ":9200/status", "", ""},
		{"a LAN listener", etcdPool + "status:\n  listen: 10.0.0.11:9108\n  allow_remote: true\n", "http://10.0.0.11:9108/status", "", ""},
		{"no listener and no URL", etcdPool + "status:\n  listen: \"\"\n", "",
			"pool.status_url (line 3): is required with pool.register when status.listen is off", ""},
		{"no listener, registration off", etcdPool + "  register: false\nstatus:\n  listen: \"\"\n", "", "", ""},
		{"a URL that is not http", etcdPool + "  status_url: ftp://x/status\n", "", `pool.status_url (line 7): must be an http(s) URL, got "ftp://x/status"`, ""},
		{"without etcd nothing registers", "status:\n  listen: 127.0.0.1:9108\n", "http://127.0.0.1:9108/status", "", ""},
		{"min_serving with etcd: the members register, no static list needed", etcdPool + "  min_serving: 2\n", "http://127.0.0.1:9108/status", "", "pool.status_url"},
		{"min_serving without etcd needs the listed peers", "pool:\n  min_serving: 1\n", "",
			"pool.min_serving (line 4): is 1 but only 0 peers are listed in pool.peers", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse([]byte("engine:\n  url: http://127.0.0.1:8000\n"+tc.yml), now)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if got := cfg.PoolStatusURL(); got != tc.url {
				t.Errorf("PoolStatusURL = %q, want %q", got, tc.url)
			}
			warned := strings.Join(cfg.Warnings, "\n")
			if tc.warning == "" && strings.Contains(warned, "pool.status_url") {
				t.Errorf("unexpected warning: %s", warned)
			}
			if tc.warning != "" && !strings.Contains(warned, tc.warning) {
				t.Errorf("warnings %q, want one containing %q", warned, tc.warning)
			}
		})
	}
}
