package simclient

import (
	"reflect"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

var (
	durationType     = reflect.TypeFor[time.Duration]()
	autoDurationType = reflect.TypeFor[configs.AutoDuration]()
)

// ScaleAdmission divides every duration of the limiter's config by scale,
// so a limiter on the wall clock keeps the same proportions to a
// time-scaled engine as it would to a real one: its queue wait, deferred
// cancellation, result TTL, retry window, slow start and read timeouts are
// engine time in the config and wall time in the process. It walks the
// struct, so a duration field added to configs.Admission later is scaled
// too.
func ScaleAdmission(a configs.Admission, scale float64) configs.Admission {
	if !(scale > 0) || scale == 1 {
		return a
	}
	scaleDurations(reflect.ValueOf(&a).Elem(), scale)
	return a
}

func scaleDurations(v reflect.Value, scale float64) {
	switch {
	case v.Type() == durationType:
		v.SetInt(int64(float64(v.Int()) / scale))
	case v.Type() == autoDurationType:
		v.Set(reflect.ValueOf(v.Interface().(configs.AutoDuration).Divided(scale)))
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				scaleDurations(v.Field(i), scale)
			}
		}
	case v.Kind() == reflect.Slice:
		for i := range v.Len() {
			scaleDurations(v.Index(i), scale)
		}
	}
}
