package stats

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
)

// The collector reads the snapshot at scrape time, names every reason
// from the start (zero until it happens), and splits the labelled counters
// out of the snapshot's totals.
func TestCollectorExposesTheSnapshot(t *testing.T) {
	st := Stats{Calls: 7, Rejected: map[string]uint64{"queue_full": 2},
		KeyedRetries: 5, KeyedRetriesFound: 3, Suspicions: 4, FalseSuspicions: 1,
		Automatic: true, Cap: 24, HeldRefused: map[string]uint64{"wait_expired": 6}, Paused: 1500 * time.Millisecond}
	c := NewCollector(func() Stats { return st }, []string{"queue_full", "wait_expired"})
	for _, tc := range []struct{ name, want string }{
		{"vigil_admission_calls_total", "vigil_admission_calls_total 7\n"},
		{"vigil_admission_rejected_total", "vigil_admission_rejected_total{reason=\"queue_full\"} 2\n" +
			"vigil_admission_rejected_total{reason=\"wait_expired\"} 0\n"},
		{"vigil_admission_keyed_retries_total", "vigil_admission_keyed_retries_total{found=\"false\"} 2\n" +
			"vigil_admission_keyed_retries_total{found=\"true\"} 3\n"},
		{"vigil_admission_stall_suspicions_total", "vigil_admission_stall_suspicions_total{false=\"false\"} 3\n" +
			"vigil_admission_stall_suspicions_total{false=\"true\"} 1\n"},
		{"vigil_admission_cap_automatic", "vigil_admission_cap_automatic 1\n"},
		{"vigil_admission_cap", "vigil_admission_cap 24\n"},
		{"vigil_admission_paused_seconds_total", "vigil_admission_paused_seconds_total 1.5\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := collectOne(t, c, tc.name)
			if !strings.Contains(got, tc.want) {
				t.Errorf("got\n%s\nwant the lines\n%s", got, tc.want)
			}
		})
	}
	st.Calls = 9 // read again at the next scrape
	if got := collectOne(t, c, "vigil_admission_calls_total"); !strings.Contains(got, "vigil_admission_calls_total 9\n") {
		t.Errorf("second scrape: %s, want calls_total 9", got)
	}
	if n := testutil.CollectAndCount(c, "vigil_admission_held_engine_calls_total"); n != 2+2 {
		t.Errorf("held_engine_calls_total: %d series, want 4 (diverted, waited, one refused per reason)", n)
	}
}

func collectOne(t *testing.T, c prometheus.Collector, name string) string {
	t.Helper()
	b, err := testutil.CollectAndFormat(c, expfmt.TypeTextPlain, name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
