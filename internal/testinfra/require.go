package testinfra

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
)

// The environment variables that turn a missing real part from a skip
// into a failure. CI=true turns every one of them on (see Required).
const (
	RequireDockerEnv   = "VIGIL_REQUIRE_DOCKER"
	RequireHAProxyEnv  = "VIGIL_REQUIRE_HAPROXY"
	RequireNodeEnv     = "VIGIL_REQUIRE_NODE"
	RequireChromiumEnv = "VIGIL_REQUIRE_CHROMIUM"
	RequireProcEnv     = "VIGIL_REQUIRE_PROC"
)

// CIEnv is set to "true" by CI, where every real part is installed and a
// test that cannot get one must fail, not skip.
const CIEnv = "CI"

// Required says whether a missing real part named by env fails the test
// instead of skipping it: env is "1", or the run is CI's.
func Required(env string) bool {
	return os.Getenv(env) == "1" || os.Getenv(CIEnv) == "true"
}

// Unavailable is the require rule, the one way a test gives up on a real
// part this machine lacks (HAProxy, dockerd, etcd, node, Chromium, ...):
// it skips with a loud "WHAT UNAVAILABLE" message, or fails when the part
// is Required. Never t.Skip for a missing part directly: in CI that skip
// would pass a test that never ran.
func Unavailable(t testing.TB, what, env string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s UNAVAILABLE: %v", what, err)
	if Required(env) {
		t.Fatalf("%s (%s=1 or %s=true requires it)", msg, env, CIEnv)
	}
	t.Skip(msg + " (set " + env + "=1 to make this a failure)")
}

// LookPath is exec.LookPath for the first of names found, under the
// require rule: a test that needs a binary gets its path, or is skipped
// (failed when Required) naming what is missing.
func LookPath(t testing.TB, what, env string, names ...string) string {
	t.Helper()
	var err error
	for _, name := range names {
		var p string
		if p, err = exec.LookPath(name); err == nil {
			return p
		}
	}
	Unavailable(t, what, env, err)
	return ""
}

// Long marks a test that takes seconds to minutes (a time-scaled run of
// the simulated engine, an end-to-end recovery): `go test -short ./...`,
// the quick local run, skips it. CI runs the whole suite, so under CI=true
// -short is a failure rather than a quiet loss of the long tests.
func Long(t testing.TB, what string) {
	t.Helper()
	if !testing.Short() {
		return
	}
	if os.Getenv(CIEnv) == "true" {
		t.Fatalf("%s: a long test, and CI=true runs every test: do not pass -short in CI", what)
	}
	t.Skip("a long test (" + what + "): skipped under -short")
}

// FreeAddr returns a loopback "127.0.0.1:port" that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := freeAddr()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return addr
}

// freeAddr is FreeAddr for a caller with no test.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("%w: find a free port: %v", errSetup, err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// shortTempDir makes a temp directory with a short path: unix socket paths
// are limited to about 108 bytes, and t.TempDir's names are long.
func shortTempDir(prefix string) (string, error) {
	return os.MkdirTemp("", prefix)
}

// AloneEnv names the variable under which the load tests run: tests that
// compare two time-scaled runs of the simulated engine (through vigil and
// without it) and so need the machine's cores to themselves. Beside the
// other packages of `go test ./...` on 2 cores, the engine, vigil and the
// clients of a scaled run lose CPU unevenly between the two runs and the
// comparison measures the machine (seen: 128 client timeouts through
// vigil against 0 direct, only when the e2e tests ran beside). test.sh
// runs them after the parallel suite, one package at a time, without the
// race detector (its CPU cost starves a run scaled 80-200x), with
// VIGIL_ALONE=1.
const AloneEnv = "VIGIL_ALONE"

// Alone skips a load test unless AloneEnv is "1" (see AloneEnv).
func Alone(t testing.TB) {
	t.Helper()
	if os.Getenv(AloneEnv) != "1" {
		t.Skip("a load test: runs alone, after the parallel suite (" + AloneEnv + "=1; test.sh does it)")
	}
}
