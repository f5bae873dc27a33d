package enginesim

import (
	"math"
	"strings"
	"testing"
)

func TestPyFloat(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0.0"}, {1, "1.0"}, {201, "201.0"}, {0.001, "0.001"}, {16384, "16384.0"},
		{2.424921e+06, "2.424921e+06"}, {400000, "400000.0"}, {1.7644617e+09, "1.7644617e+09"},
		{5.250464372999999, "5.250464372999999"}, {2.187354112e+09, "2.187354112e+09"},
		{1e-05, "1e-05"}, {math.Inf(1), "+Inf"}, {0.3, "0.3"}, {2560, "2560.0"},
	}
	for _, tc := range tests {
		if got := pyFloat(tc.in); got != tc.want {
			t.Errorf("pyFloat(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Every vllm: sample line of the fixture that our engine also exports is
// formatted the same way (names, label order, value formatting), once the
// values themselves are set aside.
func TestExpositionShapeMatchesFixture(t *testing.T) {
	raw, err := readFixture()
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	m := newMetrics(cfg)
	var sb strings.Builder
	if err := m.writeText(&sb, 1.7644617e+09); err != nil {
		t.Fatal(err)
	}
	ours := map[string]bool{}
	for _, l := range strings.Split(sb.String(), "\n") {
		if i := strings.LastIndexByte(l, ' '); i > 0 && !strings.HasPrefix(l, "#") {
			ours[l[:i]] = true
		}
	}
	for _, l := range strings.Split(raw, "\n") {
		if !strings.HasPrefix(l, "vllm:") || strings.HasPrefix(l, "vllm:cache_config_info") {
			continue
		}
		key := l[:strings.LastIndexByte(l, ' ')]
		if !ours[key] {
			t.Errorf("fixture series %q not exported identically", key)
		}
	}
}
