package main

import (
	"testing"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

// vigil runs on every GPU node; the simulated engine and clients are the
// demo's (cmd/vigil-demo) and must not ride along in its binary. go list
// answers for the binary as built, test files aside.
func TestTheDaemonBinaryLinksNoSimulation(t *testing.T) {
	deps := testinfra.Deps(t)
	for _, p := range deps {
		switch p {
		case "github.com/vigil-dev/vigil/enginesim", "github.com/vigil-dev/vigil/internal/simclient":
			t.Errorf("cmd/vigil links %s; the simulation belongs to cmd/vigil-demo", p)
		}
	}
}
