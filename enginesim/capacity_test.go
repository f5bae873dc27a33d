package enginesim

import "testing"

// paperWorkload is the calibration target: 12,000-token prompts with a
// 2,000-token shared prefix and ~300-token answers.
var paperWorkload = Workload{PromptTokens: 12000, PrefixTokens: 2000, OutputTokens: 300}

func TestDefaultCapacity(t *testing.T) {
	c := MeasureCapacity(DefaultConfig(), paperWorkload)
	t.Logf("default capacity: %.3f calls/s (engine time) for %+v", c, paperWorkload)
	if c < 2.6 || c > 3.0 {
		t.Fatalf("default cost model gives %.3f calls/s, want near 2.8", c)
	}
}

func BenchmarkCapacity(b *testing.B) {
	var c float64
	for b.Loop() {
		c = MeasureCapacity(DefaultConfig(), paperWorkload)
	}
	b.ReportMetric(c, "calls/s")
}
