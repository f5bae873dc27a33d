// Package simengine starts the simulated engine for the daemon's and the
// command's tests. It is apart from testinfra because enginesim's own
// tests use testinfra.
package simengine

import (
	"context"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/enginesim"
)

// Start runs the simulated engine on a free loopback port at 20x
// time with 4 seats (tweak may change its config) until the test ends:
// the engine of the daemon's and the command's tests.
func Start(t testing.TB, tweak func(*enginesim.Config)) *enginesim.Server {
	t.Helper()
	cfg := enginesim.DefaultConfig()
	cfg.Scale = 20
	cfg.MaxNumSeqs = 4
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := enginesim.Start(context.Background(), "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	select {
	case <-s.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("engine not ready")
	}
	return s
}
