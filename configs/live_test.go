package configs

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// Every live key reads and writes its own value: Get's text goes back in
// through Set to the same value, on the defaults and on a changed config.
func TestLiveKeysRoundTrip(t *testing.T) {
	changed := Default()
	changed.Admission.MaxInFlight = 64
	changed.Watchdog.HangAfter = Fixed(90 * time.Second)
	changed.Watchdog.SaturatedWaiting = 16
	changed.Watchdog.ProbeSLO = 10 * time.Second
	changed.Watchdog.DownAfter = 3
	changed.Status.RunbookURL = "https://runbooks.example/vigil"
	for _, k := range LiveKeys() {
		for _, from := range []Config{Default(), changed} {
			text := k.Get(&from)
			into := Default()
			if err := k.Set(&into, text); err != nil {
				t.Errorf("%s: Set(%q) = %v", k.Key, text, err)
				continue
			}
			if got := k.Get(&into); got != text {
				t.Errorf("%s: Set(%q) then Get = %q", k.Key, text, got)
			}
		}
	}
}

func TestLiveKeysSetRefusesWhatTheRestOfTheConfigForbids(t *testing.T) {
	for _, tc := range []struct{ key, value, want string }{
		{"watchdog.hang_after", "4s", "must be > watchdog.interval (5s)"},
		{"watchdog.hang_after", "0s", "want a positive duration such as 90s or 5m, or auto"},
		{"watchdog.probe_slo", "2m", "must be <= the probe_timeout in force (1m30s)"},
		{"admission.max_in_flight", "-1", "want an integer >= 0"},
		{"watchdog.down_after", "0", "want an integer >= 1"},
	} {
		k, ok := Live(tc.key)
		if !ok {
			t.Fatalf("%s is not live", tc.key)
		}
		c := Default()
		if err := k.Set(&c, tc.value); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%s: Set = %v, want %q", tc.key, tc.value, err, tc.want)
		}
	}
	if k, _ := Live("watchdog.hang_after"); k.Set(&Config{}, "auto") != nil {
		t.Error("hang_after auto refused")
	}
}

func TestOverridableKeysAreTheOverridableLiveKeys(t *testing.T) {
	want := []string{"admission.max_in_flight", "watchdog.hang_after", "watchdog.saturated_waiting"}
	if !slices.Equal(OverridableKeys, want) {
		t.Fatalf("OverridableKeys = %v, want %v", OverridableKeys, want)
	}
	if _, ok := Live("engine.url"); ok {
		t.Fatal("engine.url is live")
	}
}
