package enginesim

import (
	"strings"
	"testing"
)

// Each model of the family is a valid engine, and differs from the
// default in capacity the way its name says.
func TestTheCostModelsDifferAsTheirNamesSay(t *testing.T) {
	t.Parallel()
	capacity := func(name string) float64 {
		m, err := CostModelByName(name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		m.Apply(&cfg)
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return MeasureCapacity(cfg, m.Workload)
	}
	base := capacity("default")
	for _, c := range []struct {
		name   string
		lo, hi float64 // capacity against the default's
	}{
		{"prefill-bound", 0.2, 0.6},
		{"big-prefix", 1.2, 10},
		{"fast10", 8, 12},
		{"fast20", 16, 24},
		{"slow10", 0.08, 0.12},
		{"slow20", 0.04, 0.06},
	} {
		if r := capacity(c.name) / base; r < c.lo || r > c.hi {
			t.Errorf("%s: capacity %.2fx the default's, want %.2f-%.2fx", c.name, r, c.lo, c.hi)
		}
	}
	// kv-bound keeps the capacity (prefill bounds it) but not the batch:
	// its KV cache holds about 96 of its calls where the default holds
	// every seat's.
	kv, _ := CostModelByName("kv-bound")
	cfg := DefaultConfig()
	kv.Apply(&cfg)
	w := kv.Workload
	if calls := cfg.KVCacheTokens / (w.PromptTokens - w.PrefixTokens + 2*w.OutputTokens); calls != 96 {
		t.Errorf("kv-bound holds %d calls, want 96", calls)
	}
	if _, err := CostModelByName("nope"); err == nil || !strings.Contains(err.Error(), "fast10") {
		t.Errorf("unknown model: %v", err)
	}
}
