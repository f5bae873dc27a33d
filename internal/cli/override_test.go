package cli

import (
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/internal/testinfra/simengine"
)

func TestOverrideCommandsRoundTripThroughTheDaemon(t *testing.T) {
	s := simengine.Start(t, nil)
	td := startDaemon(t, testinfra.DaemonConfig(t, s.URL()))
	getBody(t, td.statusURL+"/healthz")
	addr := strings.TrimPrefix(td.statusURL, "http://")

	code, _, errOut := vigil(t, "override", "set", "--status", addr, "admission.max_in_flight", "64")
	if code != exitUsage || !strings.Contains(errOut, "--until") {
		t.Fatalf("an override without until must be refused: exit %d, %s", code, errOut)
	}
	code, out, errOut := vigil(t, "override", "set", "--status", addr, "--for", "2h", "--reason", "load test OPS-1", "admission.max_in_flight", "64")
	if code != 0 || !strings.Contains(out, "admission.max_in_flight") {
		t.Fatalf("set: exit %d, %s %s", code, out, errOut)
	}
	if got := td.d.Limiter().MaxInFlight(); got != 64 {
		t.Fatalf("limiter cap after override = %d, want 64", got)
	}
	code, out, _ = vigil(t, "override", "list", "--status", addr)
	if code != 0 || !strings.Contains(out, "load test OPS-1") || !strings.Contains(out, "was 0") {
		t.Fatalf("list: exit %d\n%s", code, out)
	}
	code, out, _ = vigil(t, "override", "clear", "--status", addr, "admission.max_in_flight")
	if code != 0 || td.d.Limiter().MaxInFlight() != 0 {
		t.Fatalf("clear: exit %d, cap %d\n%s", code, td.d.Limiter().MaxInFlight(), out)
	}
}
