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

// MeasureTTFT is the prefill's own cost: it scales with the cost model's
// steps and prefill price, and the default's lone 12,000-token prompt
// (10,000 tokens past its cached prefix, two steps of 8,192) takes about
// a third of a second.
func TestMeasureTTFTFollowsTheCostModel(t *testing.T) {
	t.Parallel()
	ttft := func(name string) float64 {
		m, err := CostModelByName(name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		m.Apply(&cfg)
		return MeasureTTFT(cfg, paperCalls).Seconds()
	}
	base := ttft("default")
	if base < 0.3 || base > 0.4 {
		t.Errorf("default: lone TTFT %.3fs, want 0.3-0.4s", base)
	}
	for _, c := range []struct {
		name   string
		lo, hi float64
	}{
		{"prefill-bound", 2.5, 3},
		{"decode-bound", 0.99, 1.05},
		{"fast10", 0.099, 0.101},
		{"slow20", 19.9, 20.1},
	} {
		if r := ttft(c.name) / base; r < c.lo || r > c.hi {
			t.Errorf("%s: lone TTFT %.3fx the default's, want %.3f-%.3fx", c.name, r, c.lo, c.hi)
		}
	}
}
