package humanize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Duration renders a measured duration as an operator reads it, as
// precise as its size deserves: "850ms", "4.2s", "45s", "3m05s", "1h02m".
// Zero and negative durations read "0s".
func Duration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	// Each style is chosen by the value as it will be shown, rounded:
	// 59.7s is "1m00s", never "60s".
	s := d.Round(time.Second)
	switch {
	case d == 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d.Round(100*time.Millisecond) < 10*time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case s < time.Minute:
		return fmt.Sprintf("%ds", int(s/time.Second))
	case s < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(s/time.Minute), int(s%time.Minute/time.Second))
	default:
		return hoursMinutes(d)
	}
}

// Span renders a measured span to the second for a page: seconds alone
// under two minutes ("95s"), then minutes and seconds ("3m05s", "3m" on
// the minute), then hours and minutes ("1h02m").
func Span(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 120:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		if s%60 == 0 {
			return fmt.Sprintf("%dm", s/60)
		}
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	default:
		return fmt.Sprintf("%dh%02dm", s/3600, (s%3600)/60)
	}
}

// Estimate renders an estimate coarsely, never sooner than it is under a
// minute (seconds round up): "40s", "6m", "2h10m", "2h00m".
func Estimate(d time.Duration) string {
	switch secs := int(math.Ceil(d.Seconds())); {
	case secs < 60:
		return fmt.Sprintf("%ds", secs)
	case d.Round(time.Minute) < time.Hour:
		return fmt.Sprintf("%dm", int(d.Round(time.Minute)/time.Minute))
	default:
		return hoursMinutes(d)
	}
}

// Rough renders an estimate or an age without false precision: seconds
// under two minutes ("40s", "95s"), whole minutes under an hour ("6m"),
// then hours and minutes ("2h05m", "2h" on the hour).
func Rough(d time.Duration) string {
	switch s := d.Round(time.Second); {
	case s < 2*time.Minute:
		return fmt.Sprintf("%ds", int64(s/time.Second))
	case d.Round(time.Minute) < time.Hour:
		return fmt.Sprintf("%dm", int64(d.Round(time.Minute)/time.Minute))
	default:
		m := int64(d.Round(time.Minute) / time.Minute)
		if m%60 == 0 {
			return fmt.Sprintf("%dh", m/60)
		}
		return fmt.Sprintf("%dh%02dm", m/60, m%60)
	}
}

// GoTenths renders a duration in Go's notation, to a tenth of a second
// under a minute and to the second above: "45.3s", "3m5s". The recovery's
// step details have always read this way.
func GoTenths(d time.Duration) string {
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// GoMinutes renders a total in Go's notation to the minute ("31m0s",
// "1h5m0s"), and none at all as "0". The digest's totals read this way.
func GoMinutes(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return d.Round(time.Minute).String()
}

// hoursMinutes is "2h05m", rounded to the minute.
func hoursMinutes(d time.Duration) string {
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
}

// Remaining renders the time left of something that ends (an override)
// to the minute: "59m", "1h", "2h30m", "under a minute".
func Remaining(d time.Duration) string {
	d = d.Round(time.Minute)
	if d < time.Minute {
		return "under a minute"
	}
	s := strings.TrimSuffix(d.String(), "0s")
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
