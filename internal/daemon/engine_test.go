package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/enginesim"
)

// startEngine runs the simulated engine on a free port, 20x time.
func startEngine(t *testing.T, tweak func(*enginesim.Config)) *enginesim.Server {
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
