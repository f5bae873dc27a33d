package alerts

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"time"
)

// count renders a count or rate for a human: "2,340", "41,200", "0.5".
func count(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "?"
	}
	neg := x < 0
	if neg {
		x = -x
	}
	var s string
	if x < 10 && x != math.Trunc(x) {
		s = strconv.FormatFloat(x, 'f', 1, 64)
	} else {
		s = group(strconv.FormatFloat(math.Round(x), 'f', 0, 64))
	}
	if neg {
		return "-" + s
	}
	return s
}

// group puts thousands separators into a string of digits.
func group(digits string) string {
	if len(digits) <= 3 {
		return digits
	}
	head := len(digits) % 3
	if head == 0 {
		head = 3
	}
	out := digits[:head]
	for i := head; i < len(digits); i += 3 {
		out += "," + digits[i:i+3]
	}
	return out
}

// exactDuration renders a measured span to the second: "95s", "3m05s",
// "1h02m". Under two minutes seconds read best; above, minutes.
func exactDuration(d time.Duration) string {
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

// roughDuration renders an estimate or an age, without false precision:
// "40s", "6m", "2h05m".
func roughDuration(d time.Duration) string {
	switch {
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int64(d.Round(time.Second)/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int64(d.Round(time.Minute)/time.Minute))
	default:
		m := int64(d.Round(time.Minute) / time.Minute)
		if m%60 == 0 {
			return fmt.Sprintf("%dh", m/60)
		}
		return fmt.Sprintf("%dh%02dm", m/60, m%60)
	}
}

// clock renders a wall-clock time for a page: "15:04 UTC".
func clock(t time.Time) string { return t.UTC().Format("15:04 UTC") }

// displayURL is the engine URL as pages show it: never any userinfo or
// query, which is where credentials hide in URLs.
func displayURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}
