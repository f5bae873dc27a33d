package configs

import (
	"fmt"
	"net"
	"time"
)

// Status is vigil's own localhost listener: /metrics, /status and the
// override API.
type Status struct {
	Listen string `yaml:"listen"`
}

// Pool lists peer vigils, so pages and diagnose show the whole pool and
// the recovery guard never drains a member while another is drained.
type Pool struct {
	// Peers are other vigils' /status URLs.
	Peers   []string      `yaml:"peers"`
	Timeout time.Duration `yaml:"timeout"`
}

// Override is a temporary change with a mandatory expiry and reason; vigil
// restores the replaced value when it expires (docs/design.md section 8).
type Override struct {
	// Key is the config path changed, e.g. admission.max_in_flight.
	Key   string `yaml:"key"`
	Value string `yaml:"value"`
	// Until is an RFC 3339 time.
	Until  time.Time `yaml:"until"`
	Reason string    `yaml:"reason"`
}

// MaxOverride is how far in the future an override may expire.
const MaxOverride = 7 * 24 * time.Hour

// OverridableKeys are the config paths an override may change: the ones
// vigil can change live (cmd/vigil's liveSettings applies them).
var OverridableKeys = []string{
	"admission.max_in_flight",
	"watchdog.hang_after",
	"watchdog.saturated_waiting",
}

func defaultStatus() Status { return Status{Listen: "127.0.0.1:9108"} }

func defaultPool() Pool { return Pool{Timeout: 3 * time.Second} }

func (s *Status) validate(v *validator) {
	if s.Listen == "" {
		return // disabled
	}
	if _, _, err := net.SplitHostPort(s.Listen); err != nil {
		v.errorf("status.listen", "must be host:port: %v", err)
	}
}

func (p *Pool) validate(v *validator) {
	for i, u := range p.Peers {
		v.httpURL(indexPath("pool.peers", i), u)
	}
	v.positive("pool.timeout", p.Timeout)
}

// ValidateOverride checks one override against the rules every override
// obeys; now is injected so tests need no clock.
func ValidateOverride(o Override, now time.Time) error {
	known := false
	for _, k := range OverridableKeys {
		known = known || k == o.Key
	}
	switch {
	case !known:
		return fmt.Errorf("key %q cannot be overridden (allowed: %v)", o.Key, OverridableKeys)
	case o.Value == "":
		return fmt.Errorf("value is required")
	case o.Reason == "":
		return fmt.Errorf("reason is required: say why, so the next operator knows")
	case o.Until.IsZero():
		return fmt.Errorf("until is required: every override expires")
	case !o.Until.After(now):
		return fmt.Errorf("until %s is in the past", o.Until.Format(time.RFC3339))
	case o.Until.Sub(now) > MaxOverride:
		return fmt.Errorf("until %s is more than %s away", o.Until.Format(time.RFC3339), MaxOverride)
	}
	return nil
}

// validateOverrides checks the overrides written in the config file. One
// that has already expired is not an error (the file may simply be older
// than the override): it is skipped with a warning so vigil still starts.
func validateOverrides(v *validator, os []Override) {
	for i, o := range os {
		path := indexPath("overrides", i)
		if !o.Until.IsZero() && !o.Until.After(v.now) {
			v.warnf(path, "expired at %s; ignored", o.Until.Format(time.RFC3339))
			continue
		}
		if err := ValidateOverride(o, v.now); err != nil {
			v.errorf(path, "%v", err)
		}
	}
}
