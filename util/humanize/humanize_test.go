package humanize

import (
	"math"
	"testing"
	"time"
)

func TestCount(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want string
	}{
		{0, "0"}, {6, "6"}, {0.4, "0.4"}, {2.5, "2.5"}, {9.96, "10.0"}, {10.4, "10"},
		{999, "999"}, {1000, "1,000"}, {41200, "41,200"}, {2340.46, "2,340"}, {1234567, "1,234,567"},
		{-1, "-1"}, {-0.4, "-0.4"}, {-1500, "-1,500"}, {-12345.6, "-12,346"}, {2746.6, "2,747"},
		{1e20, "100,000,000,000,000,000,000"}, // beyond int64: no overflow
		{math.NaN(), "?"}, {math.Inf(1), "?"}, {math.Inf(-1), "?"},
	} {
		if got := Count(c.in); got != c.want {
			t.Errorf("Count(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestTenths(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want string
	}{
		{0, "0"}, {6, "6"}, {999, "999"}, {1000, "1,000"}, {41200, "41,200"}, {2340.46, "2,340.5"},
		{0.25, "0.2"}, {1234567, "1,234,567"}, {1234567.5, "1,234,567"}, {-1, "-1"}, {-2.5, "-2.5"},
		{9.97, "10"}, {999.96, "1,000"}, {3.02, "3"},
		{math.NaN(), "NaN"}, {math.Inf(1), "+Inf"}, {math.Inf(-1), "-Inf"},
	} {
		if got := Tenths(c.in); got != c.want {
			t.Errorf("Tenths(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestDurations(t *testing.T) {
	const ms, s, m, h = time.Millisecond, time.Second, time.Minute, time.Hour
	for _, c := range []struct {
		name string
		fn   func(time.Duration) string
		in   time.Duration
		want string
	}{
		{"Duration", Duration, 0, "0s"},
		{"Duration", Duration, -5 * s, "0s"},
		{"Duration", Duration, 850 * ms, "850ms"},
		{"Duration", Duration, 4200 * ms, "4.2s"},
		{"Duration", Duration, 9960 * ms, "10s"}, // not "10.0s"
		{"Duration", Duration, 45 * s, "45s"},
		{"Duration", Duration, 59700 * ms, "1m00s"}, // not "60s"
		{"Duration", Duration, 185 * s, "3m05s"},
		{"Duration", Duration, h - 300*ms, "1h00m"}, // not "60m00s"
		{"Duration", Duration, h + 2*m + 20*s, "1h02m"},
		{"Duration", Duration, 62 * m, "1h02m"},

		{"Span", Span, 0, "0s"},
		{"Span", Span, 95 * s, "95s"},
		{"Span", Span, 119600 * ms, "2m"},
		{"Span", Span, 185 * s, "3m05s"},
		{"Span", Span, 3 * m, "3m"},
		{"Span", Span, 6 * m, "6m"},
		{"Span", Span, h + 2*m + 20*s, "1h02m"},

		{"Estimate", Estimate, 39100 * ms, "40s"}, // rounds up
		{"Estimate", Estimate, 59200 * ms, "1m"},  // not "60s"
		{"Estimate", Estimate, 371 * s, "6m"},
		{"Estimate", Estimate, 2*h + 10*m, "2h10m"},
		{"Estimate", Estimate, 2 * h, "2h00m"},

		{"Rough", Rough, 40 * s, "40s"},
		{"Rough", Rough, 95 * s, "95s"},
		{"Rough", Rough, 119700 * ms, "2m"}, // not "120s"
		{"Rough", Rough, 371 * s, "6m"},
		{"Rough", Rough, h - 20*s, "1h"}, // not "60m"
		{"Rough", Rough, 2*h + 5*m, "2h05m"},
		{"Rough", Rough, 2 * h, "2h"},
		{"Rough", Rough, 6*m + 20*s, "6m"},
		{"Rough", Rough, 3 * h, "3h"},

		{"GoTenths", GoTenths, 45340 * ms, "45.3s"},
		{"GoTenths", GoTenths, 185400 * ms, "3m5s"},
		{"GoMinutes", GoMinutes, 0, "0"},
		{"GoMinutes", GoMinutes, 31*m + 10*s, "31m0s"},
		{"GoMinutes", GoMinutes, h + 5*m, "1h5m0s"},
	} {
		if got := c.fn(c.in); got != c.want {
			t.Errorf("%s(%v) = %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

func TestClocks(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.FixedZone("CET", 3600))
	if got := ClockUTC(at); got != "04:06 UTC" {
		t.Errorf("ClockUTC = %q", got)
	}
	if got := StampUTC(at); got != "2026-03-04 04:06:07Z" {
		t.Errorf("StampUTC = %q", got)
	}
}

func TestRemainingTimeReadsLikeAPerson(t *testing.T) {
	for d, want := range map[time.Duration]string{
		59*time.Minute + 20*time.Second: "59m",
		time.Hour:                       "1h",
		2*time.Hour + 30*time.Minute:    "2h30m",
		10 * time.Second:                "under a minute",
	} {
		if got := Remaining(d); got != want {
			t.Errorf("Remaining(%v) = %q, want %q", d, got, want)
		}
	}
}
