package main

import (
	"strings"
	"testing"
	"time"
)

// The demo is the README's first command: it must tell the whole story,
// in order, in under a minute.
func TestDemoTellsTheStoryInUnderAMinute(t *testing.T) {
	if testing.Short() {
		t.Skip("the demo takes ~30s")
	}
	start := time.Now()
	code, out, errOut := vigil(t, "demo")
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("demo exited %d: %s\n%s", code, errOut, out)
	}
	if took > 60*time.Second {
		t.Errorf("demo took %s, want under 60s", took)
	}
	// Each beat of the story, in order.
	beats := []string{
		"vigil: HEALTHY",
		"▶ overload",
		"vigil: SATURATED",
		"NEVER restart",
		"a collective hang under load",
		"load balancer: node1 → DRAIN",
		"restart: stopping the hung engine",
		"vigil: LOADING",
		"load balancer: node1 weight 10%",
		"load balancer: node1 weight 100%",
		"RESOLVED on node1",
		"Summary: the overload was SATURATED and vigil never restarted it",
		"(1 restart,",
	}
	at := 0
	for _, b := range beats {
		i := strings.Index(out[at:], b)
		if i < 0 {
			t.Fatalf("the demo lacks %q after offset %d:\n%s", b, at, out)
		}
		at += i
	}
	// Nothing was restarted before the hang, and the saturation was paged.
	// (A page and the narration of the same verdict may print in either
	// order: the pager sends from its own goroutine.)
	hang := strings.Index(out, "a collective hang under load")
	if !strings.Contains(out[:hang], "PAGE ▶ :large_orange_circle: SATURATED") {
		t.Fatalf("the saturation was not paged before the hang:\n%s", out[:hang])
	}
	// The narration of HUNG and the drain it triggers happen at the same
	// moment from different goroutines: either may print first.
	if !strings.Contains(out[hang:], "vigil: HUNG") {
		t.Fatalf("the hang was never called HUNG:\n%s", out[hang:])
	}
	if strings.Contains(out[:hang], "restart:") || strings.Contains(out[:hang], "vigil: HUNG") {
		t.Fatalf("the saturated engine was treated as hung:\n%s", out[:hang])
	}
}
