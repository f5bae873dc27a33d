package harness

import (
	"bytes"
	"testing"
)

// bench/metastable and bench/pool compare arms by sending the same calls:
// a seed must draw the same arrivals and bodies every time.
func TestPaperCallsAreTheSeeds(t *testing.T) {
	ph := PaperPhases(2, PaperHoldFor)
	a1, b1 := PaperCalls(7, ph)
	a2, b2 := PaperCalls(7, ph)
	if len(a1) == 0 || len(a1) != len(a2) || len(b1) != len(a1) {
		t.Fatalf("draws of %d and %d arrivals, %d bodies", len(a1), len(a2), len(b1))
	}
	for i := range a1 {
		if a1[i] != a2[i] || !bytes.Equal(b1[i], b2[i]) {
			t.Fatalf("call %d differs between two draws of seed 7", i)
		}
	}
	a3, _ := PaperCalls(8, ph)
	if len(a3) == len(a1) && a3[0] == a1[0] {
		t.Error("seed 8 drew seed 7's calls")
	}
	if got, want := PhaseStart(ph, PhaseHold), PaperWarmFor+PaperPulseFor; got != want {
		t.Errorf("hold starts at %v, want %v", got, want)
	}
}
