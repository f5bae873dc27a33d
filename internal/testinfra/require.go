package testinfra

import (
	"fmt"
	"net"
	"os"
	"testing"
)

// The environment variables that turn a missing dependency from a skip
// into a failure (CI sets them).
const (
	RequireDockerEnv  = "VIGIL_REQUIRE_DOCKER"
	RequireHAProxyEnv = "VIGIL_REQUIRE_HAPROXY"
)

// unavailable skips the test with a loud message, or fails it when env is
// "1".
func unavailable(t testing.TB, what, env string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s UNAVAILABLE: %v", what, err)
	if os.Getenv(env) == "1" {
		t.Fatalf("%s (%s=1 requires it)", msg, env)
	}
	t.Skip(msg + " (set " + env + "=1 to make this a failure)")
}

// FreeAddr returns a loopback "127.0.0.1:port" that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testinfra: find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
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
