package configs

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// LiveKey is a setting vigil changes while it runs, without a restart: a
// SIGHUP reload applies a new value of it, and an overridable one may be
// set for a while by an override (vigil override, the API, the file's
// overrides). The table of them, liveKeys, is the one place that says how
// each is read and written: config validation checks overrides through
// it, and internal/daemon applies reloads and overrides through it.
type LiveKey struct {
	// Key is the config path, e.g. watchdog.hang_after.
	Key string
	// Overridable: an override may change it.
	Overridable bool
	// Get is the key's value in c, as an override's value writes it.
	Get func(c *Config) string
	// Check refuses a value of the wrong form, saying what it wants.
	Check func(value string) error
	// set puts a value Check accepted into c, refusing one the rest of c
	// forbids (hang_after within the interval).
	set func(c *Config, value string) error
}

// Set puts value, written as Get writes it, into c: an error says what is
// wanted (its form, or what the rest of c forbids), without the key.
func (k LiveKey) Set(c *Config, value string) error {
	if err := k.Check(value); err != nil {
		return err
	}
	return k.set(c, value)
}

// liveKeys are the live settings, overridable ones first.
var liveKeys = []LiveKey{
	{
		Key: "admission.max_in_flight", Overridable: true,
		Get:   func(c *Config) string { return strconv.Itoa(c.Admission.MaxInFlight) },
		Check: nonNegativeInt,
		set: func(c *Config, s string) error {
			c.Admission.MaxInFlight, _ = strconv.Atoi(s)
			return nil
		},
	},
	{
		Key: "watchdog.hang_after", Overridable: true,
		Get:   func(c *Config) string { return c.Watchdog.HangAfter.String() },
		Check: hangAfterValue,
		set: func(c *Config, s string) error {
			v, _ := ParseAutoDuration(s)
			if !v.IsAuto() && v.Duration() <= c.Watchdog.Interval {
				return fmt.Errorf("must be > watchdog.interval (%s)", c.Watchdog.Interval)
			}
			c.Watchdog.HangAfter = v
			return nil
		},
	},
	{
		Key: "watchdog.saturated_waiting", Overridable: true,
		Get:   func(c *Config) string { return strconv.Itoa(c.Watchdog.SaturatedWaiting) },
		Check: positiveInt,
		set: func(c *Config, s string) error {
			c.Watchdog.SaturatedWaiting, _ = strconv.Atoi(s)
			return nil
		},
	},
	{
		// probe_timeout needs a restart: the SLO is checked against the
		// timeout of the config it goes into, the one in force.
		Key:   "watchdog.probe_slo",
		Get:   func(c *Config) string { return c.Watchdog.ProbeSLO.String() },
		Check: positiveDuration,
		set: func(c *Config, s string) error {
			d, _ := time.ParseDuration(s)
			if d > c.Watchdog.ProbeTimeout {
				return fmt.Errorf("must be <= the probe_timeout in force (%s)", c.Watchdog.ProbeTimeout)
			}
			c.Watchdog.ProbeSLO = d
			return nil
		},
	},
	{
		Key:   "watchdog.down_after",
		Get:   func(c *Config) string { return strconv.Itoa(c.Watchdog.DownAfter) },
		Check: positiveInt,
		set: func(c *Config, s string) error {
			c.Watchdog.DownAfter, _ = strconv.Atoi(s)
			return nil
		},
	},
	{
		// The status page reads the config in force at every request.
		Key:   "status.runbook_url",
		Get:   func(c *Config) string { return c.Status.RunbookURL },
		Check: func(string) error { return nil }, // the file's validation checked it
		set: func(c *Config, s string) error {
			c.Status.RunbookURL = s
			return nil
		},
	},
}

// Live is the live key named key, if there is one.
func Live(key string) (LiveKey, bool) {
	for _, k := range liveKeys {
		if k.Key == key {
			return k, true
		}
	}
	return LiveKey{}, false
}

// LiveKeys are every live setting, overridable ones first.
func LiveKeys() []LiveKey { return append([]LiveKey(nil), liveKeys...) }

// OverridableKeys are the config paths an override may change: the live
// keys marked Overridable.
var OverridableKeys = overridableKeys()

func overridableKeys() []string {
	var out []string
	for _, k := range liveKeys {
		if k.Overridable {
			out = append(out, k.Key)
		}
	}
	return out
}

func nonNegativeInt(s string) error {
	if n, err := strconv.Atoi(s); err != nil || n < 0 {
		return errors.New("want an integer >= 0 (0 = automatic)")
	}
	return nil
}

func positiveInt(s string) error {
	if n, err := strconv.Atoi(s); err != nil || n < 1 {
		return errors.New("want an integer >= 1")
	}
	return nil
}

// hangAfterValue is a positive duration or auto (the window sized from
// the work; an expiring override puts auto back this way).
func hangAfterValue(s string) error {
	if v, err := ParseAutoDuration(s); err != nil || !v.IsAuto() && v.Duration() <= 0 {
		return errors.New("want a positive duration such as 90s or 5m, or auto")
	}
	return nil
}

func positiveDuration(s string) error {
	if d, err := time.ParseDuration(s); err != nil || d <= 0 {
		return errors.New("want a positive duration such as 90s or 5m")
	}
	return nil
}
