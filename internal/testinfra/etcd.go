package testinfra

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// RequireEtcdEnv turns a missing etcd from a skip into a failure.
const RequireEtcdEnv = "VIGIL_REQUIRE_ETCD"

// Etcd is a single-member etcd (Debian's etcd-server) on loopback with its
// data in a directory of its own.
type Etcd struct {
	// Endpoint is the client URL, "http://127.0.0.1:port".
	Endpoint string
	Dir      string
	cmd      *exec.Cmd
	exited   chan error // nil while no etcd process has started
	bin      string
	args     []string
}

// StartEtcd starts etcd in a temp dir and waits until it answers /health;
// it is stopped when the test ends. It skips the test (fails under
// VIGIL_REQUIRE_ETCD=1) if etcd cannot start.
func StartEtcd(t testing.TB) *Etcd {
	t.Helper()
	dir, err := shortTempDir("ve")
	if err != nil {
		t.Fatalf("testinfra: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e, err := LaunchEtcd(dir)
	if err != nil {
		giveUp(t, "ETCD", RequireEtcdEnv, err)
	}
	t.Cleanup(e.Stop)
	return e
}

// LaunchEtcd starts etcd with its data and log in dir and waits until it
// answers /health, for a caller with no test to tie it to (a bench main),
// which stops it with Stop. Heartbeat and election are shortened so leases
// of a second or two expire on time (etcd's minimum TTL follows the
// election timeout).
func LaunchEtcd(dir string) (*Etcd, error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, fmt.Errorf("%w (install etcd-server)", err)
	}
	// A free port is only free until etcd binds it: tests running beside
	// this one pick ports too, so a port taken in between is tried again
	// with new ports rather than failing the test.
	for attempt := 1; ; attempt++ {
		e, err := launchEtcdOnFreePorts(bin, dir)
		if err == nil || attempt == 5 || !strings.Contains(err.Error(), "address already in use") {
			return e, err
		}
		_ = os.RemoveAll(filepath.Join(dir, "data"))
	}
}

func launchEtcdOnFreePorts(bin, dir string) (*Etcd, error) {
	client, err := freeAddr()
	if err != nil {
		return nil, err
	}
	peer, err := freeAddr()
	if err != nil {
		return nil, err
	}
	client, peer = "http://"+client, "http://"+peer
	e := &Etcd{Endpoint: client, Dir: dir, bin: bin}
	e.args = []string{"--name", "t", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "t=" + peer, "--heartbeat-interval", "50", "--election-timeout", "250",
		"--log-level", "warn"}
	return e, e.launch()
}

// Stop kills etcd and waits for it to exit (idempotent): the tests want
// the server gone, not a clean shutdown.
func (e *Etcd) Stop() {
	if e.exited != nil {
		kill(e.cmd, e.exited)
	}
}

// kill kills cmd and waits for its exit on exited, then puts the exit back
// for a later kill.
func kill(cmd *exec.Cmd, exited chan error) {
	_ = cmd.Process.Kill()
	exited <- <-exited
}

// Restart kills etcd and starts it again on the same address and data
// after down: its keys and leases survive, as in a real etcd restart. An
// etcd that does not come back is an error.
func (e *Etcd) Restart(down time.Duration) error {
	e.Stop()
	time.Sleep(down)
	return e.launch()
}

// launch runs etcd with e's arguments and waits until it answers /health.
func (e *Etcd) launch() error {
	e.cmd = exec.Command(e.bin, e.args...)
	exited, err := daemon{what: "ETCD", env: RequireEtcdEnv, cmd: e.cmd, logPath: filepath.Join(e.Dir, "etcd.log"),
		within: 15 * time.Second, poll: 50 * time.Millisecond,
		ready: func() error {
			resp, err := http.Get(e.Endpoint + "/health")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s/health answered %d", e.Endpoint, resp.StatusCode)
			}
			return nil
		},
		stop: kill,
	}.run()
	e.exited = exited
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	return nil
}
