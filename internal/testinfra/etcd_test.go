package testinfra

import (
	"net/http"
	"os/exec"
	"strings"
	"testing"
)

// A bench main has no test: LaunchEtcd gives it an etcd it stops itself,
// Restart brings it back on the same endpoint, and a machine without etcd
// is an error naming it rather than a skip.
func TestEtcdLaunchedWithoutATest(t *testing.T) {
	if _, err := exec.LookPath("etcd"); err != nil {
		Unavailable(t, "ETCD", RequireEtcdEnv, err)
	}
	e, err := LaunchEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	healthy := func(when string) {
		t.Helper()
		resp, err := http.Get(e.Endpoint + "/health")
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: /health answered %d", when, resp.StatusCode)
		}
	}
	healthy("launched")
	if err := e.Restart(0); err != nil {
		t.Fatal(err)
	}
	healthy("restarted")
	e.Stop()
	e.Stop() // idempotent
	if _, err := http.Get(e.Endpoint + "/health"); err == nil {
		t.Fatal("etcd still answers after Stop")
	}

	t.Setenv("PATH", t.TempDir())
	if _, err := LaunchEtcd(t.TempDir()); err == nil || !strings.Contains(err.Error(), "etcd") {
		t.Fatalf("LaunchEtcd without etcd on PATH: err = %v, want one naming etcd", err)
	}
}
