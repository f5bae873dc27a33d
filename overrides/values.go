package overrides

import (
	"fmt"
	"strconv"
	"time"
)

// valueChecks parse an override's value for the keys vigil knows, so a typo
// ("64x", "5 minutes") is a 400 naming the key before anything changes.
// A key added to configs.OverridableKeys without an entry here goes to the
// Applier unchecked; the Applier still parses it.
var valueChecks = map[string]func(string) error{
	"admission.max_in_flight":    nonNegativeInt,
	"watchdog.hang_after":        positiveDuration,
	"watchdog.saturated_waiting": positiveInt,
}

func checkValue(key, value string) error {
	check, ok := valueChecks[key]
	if !ok {
		return nil
	}
	if err := check(value); err != nil {
		return fmt.Errorf("value %q for %s: %w", value, key, err)
	}
	return nil
}

func nonNegativeInt(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("want an integer >= 0")
	}
	return nil
}

func positiveInt(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return fmt.Errorf("want an integer >= 1")
	}
	return nil
}

func positiveDuration(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return fmt.Errorf("want a positive duration such as 90s or 5m")
	}
	return nil
}
