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
