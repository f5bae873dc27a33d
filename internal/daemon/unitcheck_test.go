package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

// fakeRoot lays out the files UnitWarnings reads: the shipped unit and
// drop-in and polkit rule (the real ones from systemd/), a passwd and a
// group file, and sockets (plain files with the mode and our gid).
type fakeRoot struct {
	t    *testing.T
	root string
	gid  int
}

func newFakeRoot(t *testing.T) *fakeRoot {
	r := &fakeRoot{t: t, root: t.TempDir(), gid: os.Getgid()}
	r.write("etc/passwd", "vigil:x:64999:64999::/var/lib/vigil:/usr/sbin/nologin\n")
	r.group("haproxy", "")
	return r
}

func (r *fakeRoot) write(rel, content string) {
	r.t.Helper()
	p := filepath.Join(r.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

func (r *fakeRoot) shipped(src, rel string, edit func(string) string) {
	r.t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "systemd", src))
	if err != nil {
		r.t.Fatal(err)
	}
	s := string(data)
	if edit != nil {
		s = edit(s)
	}
	r.write(rel, s)
}

// group names our gid (the owner group of every fake socket), whatever
// it is on this machine (0 when the tests run as root).
func (r *fakeRoot) group(name, members string) {
	r.write("etc/group", fmt.Sprintf("vigil:x:64999:\n%s:x:%d:%s\n", name, r.gid, members))
}

func (r *fakeRoot) socket(p string, mode os.FileMode) {
	r.t.Helper()
	r.write(p, "")
	if err := os.Chmod(filepath.Join(r.root, p), mode); err != nil {
		r.t.Fatal(err)
	}
}

func TestUnitWarnings(t *testing.T) {
	unit := func(r *fakeRoot) { r.shipped("vigil.service", "lib/systemd/system/vigil.service", nil) }
	dropin := func(r *fakeRoot) {
		r.shipped("restart-systemd.conf", "etc/systemd/system/vigil.service.d/restart-systemd.conf", nil)
	}
	polkit := func(engineUnit string) func(*fakeRoot) {
		return func(r *fakeRoot) {
			r.shipped("50-vigil-restart-engine.rules", "etc/polkit-1/rules.d/50-vigil-restart-engine.rules",
				func(s string) string { return strings.ReplaceAll(s, `"vllm.service"`, `"`+engineUnit+`"`) })
		}
	}
	systemdRestart := func(c *configs.Config) { c.Restart.Kind, c.Restart.Systemd.Unit = "systemd", "vllm-llama" }
	haproxyAt := func(sock string) func(*configs.Config) {
		return func(c *configs.Config) {
			c.LoadBalancer.Kind, c.LoadBalancer.HAProxy.Socket = "haproxy", sock
			c.LoadBalancer.HAProxy.Backend, c.LoadBalancer.HAProxy.Server = "llm", "gpu1"
		}
	}

	for _, tc := range []struct {
		name  string
		files []func(*fakeRoot)
		cfg   func(*configs.Config)
		n     int      // warnings expected
		want  []string // substrings they must contain between them
	}{
		{"no installed unit: nothing to check", nil, systemdRestart, 0, nil},
		{"systemd restart without polkit rule or drop-in", []func(*fakeRoot){unit}, systemdRestart, 2,
			[]string{"no polkit rule in /etc/polkit-1/rules.d lets it restart vllm-llama.service", "restart-systemd.conf is missing"}},
		{"systemd restart with the shipped rule and drop-in", []func(*fakeRoot){unit, dropin, polkit("vllm-llama.service")},
			systemdRestart, 0, nil},
		{"polkit rule for another unit", []func(*fakeRoot){unit, dropin, polkit("vllm.service")}, systemdRestart, 1,
			[]string{"restart vllm-llama.service"}},
		{"unit overridden to run as root", []func(*fakeRoot){unit, func(r *fakeRoot) {
			r.write("etc/systemd/system/vigil.service.d/root.conf", "[Service]\nUser=root\n")
		}}, systemdRestart, 0, nil},
		{"haproxy socket in /tmp is hidden by PrivateTmp", []func(*fakeRoot){unit}, haproxyAt("unix:///tmp/haproxy.sock"), 1,
			[]string{"/tmp/haproxy.sock is invisible to vigil", "PrivateTmp=yes"}},
		{"haproxy socket under /root is hidden by ProtectHome", []func(*fakeRoot){unit}, haproxyAt("/root/admin.sock"), 1,
			[]string{"ProtectHome=yes"}},
		{"haproxy socket group without vigil", []func(*fakeRoot){unit, func(r *fakeRoot) { r.socket("run/haproxy/admin.sock", 0o660) }},
			haproxyAt("unix:///run/haproxy/admin.sock"), 1, []string{"user vigil is not in group haproxy", "usermod -aG haproxy vigil"}},
		{"haproxy socket group with vigil", []func(*fakeRoot){unit, func(r *fakeRoot) {
			r.socket("run/haproxy/admin.sock", 0o660)
			r.group("haproxy", "www,vigil")
		}}, haproxyAt("unix:///run/haproxy/admin.sock"), 0, nil},
		{"haproxy socket not there yet", []func(*fakeRoot){unit}, haproxyAt("unix:///run/haproxy/admin.sock"), 0, nil},
		{"haproxy over tcp", []func(*fakeRoot){unit}, haproxyAt("tcp://127.0.0.1:9999"), 0, nil},
		{"docker socket group without vigil", []func(*fakeRoot){unit, func(r *fakeRoot) {
			r.socket("var/run/docker.sock", 0o660)
			r.group("docker", "")
		}}, func(c *configs.Config) { c.Restart.Kind, c.Restart.Docker.Container = "docker", "vllm" }, 1,
			[]string{"restart.docker.host: /var/run/docker.sock", "not in group docker"}},
		{"WatchdogSec too short for the cycle", []func(*fakeRoot){unit, func(r *fakeRoot) {
			r.write("etc/systemd/system/vigil.service.d/watchdog.conf", "[Service]\nWatchdogSec=40s\n")
		}}, func(c *configs.Config) { c.Watchdog.Interval = 30 * time.Second }, 1,
			[]string{"WatchdogSec in /lib/systemd/system/vigil.service is 40s", "watchdog.interval 30s", "engine.request_timeout 10s"}},
		{"WatchdogSec is checked for a root unit too", []func(*fakeRoot){unit, func(r *fakeRoot) {
			r.write("etc/systemd/system/vigil.service.d/root.conf", "[Service]\nUser=root\nWatchdogSec=1min\n")
		}}, func(c *configs.Config) { c.Watchdog.Interval = time.Minute }, 1, []string{"systemd will kill vigil"}},
		{"WatchdogSec unreadable", []func(*fakeRoot){unit, func(r *fakeRoot) {
			r.write("etc/systemd/system/vigil.service.d/watchdog.conf", "[Service]\nWatchdogSec=soon\n")
		}}, func(*configs.Config) {}, 1, []string{"WatchdogSec: time span \"soon\""}},
		{"restart command through sudo", []func(*fakeRoot){unit}, func(c *configs.Config) {
			c.Restart.Kind, c.Restart.Command.Argv = "command", []string{"/usr/bin/sudo", "systemctl", "restart", "vllm"}
		}, 1, []string{"/usr/bin/sudo cannot gain privileges"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newFakeRoot(t)
			for _, f := range tc.files {
				f(r)
			}
			cfg := loadTestConfig(t)
			tc.cfg(cfg)
			got := UnitWarnings(cfg, r.root)
			all := strings.Join(got, "\n")
			if len(got) != tc.n {
				t.Fatalf("got %d warnings, want %d:\n%s", len(got), tc.n, all)
			}
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("warnings lack %q:\n%s", w, all)
				}
			}
		})
	}
}

// loadTestConfig loads the shipped minimal config, so defaults are real.
func loadTestConfig(t *testing.T) *configs.Config {
	t.Helper()
	p := filepath.Join(t.TempDir(), "vigil.yaml")
	if err := os.WriteFile(p, []byte("engine:\n  url: http://127.0.0.1:8000\nwatchdog:\n  state_file: "+
		filepath.Join(t.TempDir(), "state.json")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := configs.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
