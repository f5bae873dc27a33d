package humanize

import "time"

// ClockUTC is a wall-clock time for a page, to the minute: "15:04 UTC".
func ClockUTC(t time.Time) string { return t.UTC().Format("15:04 UTC") }

// StampUTC is a full UTC time to the second, as the recovery's step
// details and refusals give it: "2006-01-02 15:04:05Z".
func StampUTC(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }
