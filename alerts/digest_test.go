package alerts

import (
	"testing"
	"time"

	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/watchdog"
)

func TestDigestTalliesADay(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	now := t0
	d := NewDigest(func() time.Time { return now })
	inc := &watchdog.Incident{ID: "node1-1", State: watchdog.StateSaturated, Peak: watchdog.StateSaturated}
	// 30 minutes saturated, then 10 minutes hung, then healthy.
	for i := 0; i <= 30; i++ {
		d.Observe(watchdog.Verdict{State: watchdog.StateSaturated, At: t0.Add(time.Duration(i) * time.Minute)}, inc)
	}
	hung := &watchdog.Incident{ID: "node1-2", State: watchdog.StateHung, Peak: watchdog.StateHung}
	for i := 31; i <= 40; i++ {
		d.Observe(watchdog.Verdict{State: watchdog.StateHung, At: t0.Add(time.Duration(i) * time.Minute)}, hung)
	}
	d.Observe(watchdog.Verdict{State: watchdog.StateHealthy, At: t0.Add(41 * time.Minute)}, nil)
	d.RecoveryStep(recovery.Step{Name: recovery.StepRestart, OK: true})
	d.RecoveryStep(recovery.Step{Name: recovery.StepRestart, OK: true, DryRun: true})
	d.RecoveryStep(recovery.Step{Name: recovery.StepGuardRefused})
	now = t0.Add(24 * time.Hour)

	got := d.Report("node1", 7, []string{"admission.max_in_flight=64 until Dec 1 09:00 (load test)"})
	want := "vigil digest for node1, Nov 30 09:00 to Dec 1 09:00 UTC\n" +
		"incidents: 2 (1 hung, 1 saturated)\n" +
		"restarts: 1; guard refusals: 1; recovery failures: 0\n" +
		"time saturated: 31m0s; hung or down: 10m0s; unknown: 0\n" +
		"pages sent: 7\n" +
		"overrides in force: admission.max_in_flight=64 until Dec 1 09:00 (load test)"
	if got != want {
		t.Fatalf("digest:\n%s\nwant:\n%s", got, want)
	}
	// The next digest starts from zero.
	now = now.Add(24 * time.Hour)
	if got := d.Report("node1", 0, nil); got != "vigil digest for node1, Dec 1 09:00 to Dec 2 09:00 UTC\nincidents: none\nrestarts: 0; guard refusals: 0; recovery failures: 0\ntime saturated: 0; hung or down: 0; unknown: 0\npages sent: 0\noverrides in force: none" {
		t.Fatalf("second digest:\n%s", got)
	}
}
