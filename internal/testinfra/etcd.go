package testinfra

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
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
		unavailable(t, "ETCD", RequireEtcdEnv, err)
	}
	dir, err := shortTempDir("ve")
	if err != nil {
		t.Fatalf("testinfra: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	client, peer := "http://"+FreeAddr(t), "http://"+FreeAddr(t)
	e := &Etcd{Endpoint: client, Dir: dir, exited: make(chan error, 1)}
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatalf("testinfra: %v", err)
	}
	e.cmd = exec.Command(bin, "--name", "t", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "t="+peer, "--heartbeat-interval", "50", "--election-timeout", "250",
		"--log-level", "warn")
	e.cmd.Stdout, e.cmd.Stderr = logf, logf
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := e.cmd.Start(); err != nil {
		logf.Close()
		unavailable(t, "ETCD", RequireEtcdEnv, err)
	}
	go func() { e.exited <- e.cmd.Wait(); logf.Close() }()
	t.Cleanup(e.Stop)
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(client + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return e
			}
		}
		select {
		case werr := <-e.exited:
			e.exited <- werr
			log, _ := os.ReadFile(filepath.Join(dir, "etcd.log"))
			unavailable(t, "ETCD", RequireEtcdEnv, fmt.Errorf("etcd exited (%v): %s", werr, tail(log)))
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "etcd.log"))
			unavailable(t, "ETCD", RequireEtcdEnv, fmt.Errorf("etcd not healthy at %s after 15s: %s", client, tail(log)))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills etcd and waits for it to exit (idempotent): the tests want
// the server gone, not a clean shutdown.
func (e *Etcd) Stop() {
	_ = e.cmd.Process.Kill()
	e.exited <- <-e.exited // keep the exit for the next Stop
}
