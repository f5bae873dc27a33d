package testinfra

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// RequireEtcdEnv turns a missing etcd from a skip into a failure.
const RequireEtcdEnv = "VIGIL_REQUIRE_ETCD"

// Etcd is a single-member etcd (Debian's etcd-server) on loopback with its
// data in a temp dir.
type Etcd struct {
	// Endpoint is the client URL, "http://127.0.0.1:port".
	Endpoint string
	Dir      string
	cmd      *exec.Cmd
	exited   chan error
	bin      string
	args     []string
}

// StartEtcd starts etcd and waits until it answers /health; it is stopped
// when the test ends. Heartbeat and election are shortened so leases of a
// second or two expire on time (etcd's minimum TTL follows the election
// timeout). It skips the test (fails under VIGIL_REQUIRE_ETCD=1) if etcd
// cannot start.
func StartEtcd(t testing.TB) *Etcd {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		Unavailable(t, "ETCD", RequireEtcdEnv, err)
	}
	dir, err := shortTempDir("ve")
	if err != nil {
		t.Fatalf("testinfra: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	client, peer := "http://"+FreeAddr(t), "http://"+FreeAddr(t)
	e := &Etcd{Endpoint: client, Dir: dir}
	e.args = []string{"--name", "t", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "t=" + peer, "--heartbeat-interval", "50", "--election-timeout", "250",
		"--log-level", "warn"}
	e.bin = bin
	e.start(t)
	return e
}

// Stop kills etcd and waits for it to exit (idempotent): the tests want
// the server gone, not a clean shutdown.
func (e *Etcd) Stop() {
	_ = e.cmd.Process.Kill()
	e.exited <- <-e.exited // keep the exit for the next Stop
}

// start runs etcd with e's arguments and waits until it answers /health.
func (e *Etcd) start(t testing.TB) {
	t.Helper()
	e.cmd = exec.Command(e.bin, e.args...)
	e.exited = daemon{what: "ETCD", env: RequireEtcdEnv, cmd: e.cmd, logPath: filepath.Join(e.Dir, "etcd.log"),
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
		// As Stop, on the channel start made (e.exited is set only once
		// etcd is ready).
		stop: func(cmd *exec.Cmd, exited chan error) { _ = cmd.Process.Kill(); exited <- <-exited },
	}.start(t)
}

// Restart kills etcd and starts it again on the same address and data
// after down: its keys and leases survive, as in a real etcd restart.
func (e *Etcd) Restart(t testing.TB, down time.Duration) {
	t.Helper()
	e.Stop()
	time.Sleep(down)
	e.start(t)
}
