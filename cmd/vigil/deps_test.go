package main

import (
	"os/exec"
	"strings"
	"testing"
)

// vigil runs on every GPU node; the simulated engine and clients are the
// demo's (cmd/vigil-demo) and must not ride along in its binary. go list
// answers for the binary as built, test files aside.
func TestTheDaemonBinaryLinksNoSimulation(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps printed nothing")
	}
	for _, p := range deps {
		switch p {
		case "github.com/vigil-dev/vigil/enginesim", "github.com/vigil-dev/vigil/internal/simclient":
			t.Errorf("cmd/vigil links %s; the simulation belongs to cmd/vigil-demo", p)
		}
	}
}
