package humanize

import (
	"math"
	"strconv"
	"strings"
)

// Count renders a count or a rate for a page: rounded to a whole number
// with thousands separators ("2,340", "41,200"), except that a fraction
// under ten keeps one decimal ("0.4", "2.5"). NaN and ±Inf, which a
// broken scrape can produce, read "?".
func Count(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "?"
	}
	neg := v < 0
	v = math.Abs(v)
	var s string
	if v < 10 && v != math.Trunc(v) {
		s = strconv.FormatFloat(v, 'f', 1, 64)
	} else {
		s = group(strconv.FormatFloat(math.Round(v), 'f', 0, 64))
	}
	if neg {
		return "-" + s
	}
	return s
}

// Tenths renders a number to a tenth with thousands separators
// ("2,340.5", "41,200"): the tenth is dropped when it rounds to zero, and
// from a million up, where it no longer tells anything. NaN and ±Inf are
// printed as Go prints them.
func Tenths(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	neg := v < 0
	v = math.Abs(v)
	whole := math.Floor(v)
	frac := v - whole
	var s string
	switch {
	case frac >= 0.05 && frac < 0.95 && whole < 1e6:
		s = strconv.FormatFloat(v, 'f', 1, 64)
	case frac >= 0.95:
		s = strconv.FormatFloat(whole+1, 'f', 0, 64)
	default:
		s = strconv.FormatFloat(whole, 'f', 0, 64)
	}
	intPart, dec, _ := strings.Cut(s, ".")
	s = group(intPart)
	if dec != "" {
		s += "." + dec
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
	var b strings.Builder
	b.WriteString(digits[:head])
	for i := head; i < len(digits); i += 3 {
		b.WriteByte(',')
		b.WriteString(digits[i : i+3])
	}
	return b.String()
}
