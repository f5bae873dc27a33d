package routing

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestAffinity(t *testing.T) {
	type step struct {
		after          time.Duration // since the previous step
		retries, found uint64        // cumulative, as the limiter counts
		share          float64       // want; -1: no share
		low            bool
		page           string // want a page containing this; "" none
	}
	opts := AffinityOptions{Window: 10 * time.Minute, MinRetries: 20, Low: 0.5}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"key-affine routing never pages", []step{
			{0, 0, 0, -1, false, ""},
			{time.Minute, 100, 97, 0.97, false, ""},
			{time.Minute, 300, 290, 0.967, false, ""},
		}},
		{"round-robin over three nodes pages once, however long it lasts", []step{
			{0, 0, 0, -1, false, ""},
			{time.Minute, 30, 10, 0.333, true, "ROUTING NOT KEY-AFFINE: only 33%"},
			{time.Minute, 60, 20, 0.333, true, ""},
			{time.Minute, 90, 30, 0.333, true, ""},
			{20 * time.Minute, 900, 300, 0.333, true, ""},
		}},
		{"too few retries to judge", []step{
			{0, 0, 0, -1, false, ""},
			{time.Minute, 10, 0, 0, false, ""},
			{time.Minute, 19, 0, 0, false, ""},
			{time.Minute, 20, 0, 0, true, "only 0%"},
		}},
		{"the window forgets old misses, and the fix is paged once", []step{
			{0, 0, 0, -1, false, ""},
			{time.Minute, 40, 5, 0.125, true, "NOT KEY-AFFINE"},
			// Routing fixed: all later retries find it. Within the window
			// the old misses still weigh.
			{5 * time.Minute, 80, 45, 0.5625, true, ""},
			{6 * time.Minute, 120, 85, 1, false, "key-affine again"},
			{time.Minute, 160, 125, 1, false, ""},
		}},
		{"a share hovering at the threshold pages once", []step{
			{0, 0, 0, -1, false, ""},
			{time.Minute, 100, 45, 0.45, true, "NOT KEY-AFFINE"},
			{time.Minute, 200, 100, 0.5, true, ""},
			{time.Minute, 300, 140, 0.467, true, ""},
			{time.Minute, 400, 205, 0.5125, true, ""},
		}},
		{"a quiet window has no share and keeps the judgement", []step{
			{0, 0, 0, -1, false, ""},
			{time.Minute, 40, 0, 0, true, "NOT KEY-AFFINE"},
			{11 * time.Minute, 40, 0, -1, true, ""},
		}},
		{"counters that go down restart the window", []step{
			{0, 500, 480, -1, false, ""},
			{time.Minute, 30, 0, -1, false, ""},
			{time.Minute, 60, 0, 0, true, "NOT KEY-AFFINE"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAffinity(opts)
			now := time.Unix(1_700_000_000, 0)
			for i, s := range tc.steps {
				now = now.Add(s.after)
				rep, page := a.Observe(now, s.retries, s.found)
				switch {
				case s.share < 0 && rep.Share != nil:
					t.Errorf("step %d: share %.3f, want none", i, *rep.Share)
				case s.share >= 0 && (rep.Share == nil || math.Abs(*rep.Share-s.share) > 0.001):
					t.Errorf("step %d: share %v, want %.3f (report %+v)", i, rep.Share, s.share, rep)
				}
				if rep.Low != s.low {
					t.Errorf("step %d: low %v, want %v", i, rep.Low, s.low)
				}
				if (s.page == "") != (page == "") || !strings.Contains(page, s.page) {
					t.Errorf("step %d: page %q, want one containing %q", i, page, s.page)
				}
				if got := a.Report(); got.Low != rep.Low || got.Retries != rep.Retries {
					t.Errorf("step %d: Report() %+v differs from Observe's %+v", i, got, rep)
				}
			}
		})
	}
}

func TestAffinityMetricsAndText(t *testing.T) {
	a := NewAffinity(AffinityOptions{})
	now := time.Unix(1_700_000_000, 0)
	if s := a.Report().String(); !strings.Contains(s, "no keyed retries in the last 10m0s") {
		t.Errorf("before any retry: %q", s)
	}
	a.Observe(now, 0, 0)
	a.Observe(now.Add(time.Minute), 40, 10)
	reg := prometheus.NewRegistry()
	reg.MustRegister(a.Collectors()...)
	want := `
# HELP vigil_pool_keyed_retry_found_share Share of keyed retries that found their call's execution on this node over the routing window (NaN: none).
# TYPE vigil_pool_keyed_retry_found_share gauge
vigil_pool_keyed_retry_found_share 0.25
# HELP vigil_pool_routing_not_affine 1 while the found share is low on enough retries: the load balancer does not route by key.
# TYPE vigil_pool_routing_not_affine gauge
vigil_pool_routing_not_affine 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "vigil_pool_keyed_retry_found_share", "vigil_pool_routing_not_affine"); err != nil {
		t.Error(err)
	}
	if s := a.Report().String(); !strings.Contains(s, "25% of keyed retries found their execution here (10 of 40 over 10m0s): NOT KEY-AFFINE") {
		t.Errorf("text: %q", s)
	}
}
