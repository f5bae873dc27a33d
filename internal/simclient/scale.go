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
// engine time in the config and wall time in the process (Scaled).
func ScaleAdmission(a configs.Admission, scale float64) configs.Admission {
	return Scaled(a, scale)
}

// Scaled returns v (a config section) with every duration in it divided
// by scale: each time.Duration and configs.AutoDuration among its
// exported fields, nested structs and slices included. It walks the
// struct, so a duration field added to the config later is scaled too.
// v's own slices are left as they were: the result has copies.
func Scaled[T any](v T, scale float64) T {
	if !(scale > 0) || scale == 1 {
		return v
	}
	scaleDurations(reflect.ValueOf(&v).Elem(), scale)
	return v
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
	case v.Kind() == reflect.Slice && !v.IsNil():
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(c, v)
		v.Set(c)
		for i := range v.Len() {
			scaleDurations(v.Index(i), scale)
		}
	}
}
