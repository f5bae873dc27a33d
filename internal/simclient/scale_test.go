package simclient

import (
	"reflect"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

func TestScaleAdmissionDividesEveryDuration(t *testing.T) {
	a := configs.Default().Admission
	s := ScaleAdmission(a, 25)
	va, vs := reflect.ValueOf(a), reflect.ValueOf(s)
	for i := range va.NumField() {
		f := va.Type().Field(i)
		switch {
		case f.Type == durationType:
			want := va.Field(i).Int() / 25
			if va.Field(i).Int() < 0 {
				want = va.Field(i).Int() // a sentinel (ttft_target: auto) is no duration to scale
			}
			if got := vs.Field(i).Int(); got != want {
				t.Errorf("%s: %v, want %v", f.Name, time.Duration(got), time.Duration(want))
			}
		default:
			if !reflect.DeepEqual(va.Field(i).Interface(), vs.Field(i).Interface()) {
				t.Errorf("%s changed though it is not a duration", f.Name)
			}
		}
	}
	if s.MaxQueueWait != a.MaxQueueWait/25 || s.CancelAfter != a.CancelAfter/25 {
		t.Errorf("queue wait %v, cancel after %v", s.MaxQueueWait, s.CancelAfter)
	}
}

// A scaled config is a copy: the caller's slices (the admission section's
// client timeouts) keep their durations.
func TestScaledLeavesTheCallersSlicesAlone(t *testing.T) {
	a := configs.Default().Admission
	a.ClientTimeouts = []configs.RouteTimeout{{Path: "/v1/completions", Timeout: 100 * time.Second}}
	s := ScaleAdmission(a, 25)
	if got := s.ClientTimeouts[0].Timeout; got != 4*time.Second {
		t.Errorf("scaled client timeout %v, want 4s", got)
	}
	if got := a.ClientTimeouts[0].Timeout; got != 100*time.Second {
		t.Errorf("the caller's client timeout became %v, want 100s", got)
	}
}

// The watchdog section scales as the admission section does, nested
// structs (the retry-storm window) included.
func TestScaledWatchdogSection(t *testing.T) {
	w := configs.Default().Watchdog
	s := Scaled(w, 10)
	if s.Interval != w.Interval/10 || s.RetryStorm.Window != w.RetryStorm.Window/10 {
		t.Errorf("interval %v -> %v, retry-storm window %v -> %v", w.Interval, s.Interval, w.RetryStorm.Window, s.RetryStorm.Window)
	}
	if s.SaturatedWaiting != w.SaturatedWaiting {
		t.Errorf("saturated_waiting %d -> %d: not a duration", w.SaturatedWaiting, s.SaturatedWaiting)
	}
}
