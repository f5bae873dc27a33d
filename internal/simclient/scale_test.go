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
