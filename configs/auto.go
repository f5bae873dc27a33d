package configs

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
)

// AutoDuration is a duration setting that also takes `auto`: vigil derives
// the value itself (watchdog.hang_after sizes the window from the work,
// admission.ttft_target derives the objective from the engine). It is one
// value, auto or a fixed duration, never a duration that means auto by
// convention: a fixed 0 is a 0 (refused for hang_after, "no objective"
// for ttft_target), not auto.
//
// Its YAML and JSON forms are the word auto or a duration with a unit
// ("90s", "700ms"), as the file writes it; bare numbers are refused.
type AutoDuration struct {
	d    time.Duration
	auto bool
}

// Automatic is the value auto.
func Automatic() AutoDuration { return AutoDuration{auto: true} }

// Fixed is the fixed duration d.
func Fixed(d time.Duration) AutoDuration { return AutoDuration{d: d} }

// IsAuto reports whether the value is auto.
func (a AutoDuration) IsAuto() bool { return a.auto }

// Duration is the fixed duration; 0 when auto.
func (a AutoDuration) Duration() time.Duration {
	if a.auto {
		return 0
	}
	return a.d
}

// String is the value as a config file writes it: auto, or the duration.
func (a AutoDuration) String() string {
	if a.auto {
		return "auto"
	}
	return a.d.String()
}

// Divided is the value with a fixed duration divided by scale (auto stays
// auto): for a config run against a time-scaled engine.
func (a AutoDuration) Divided(scale float64) AutoDuration {
	if a.auto {
		return a
	}
	return Fixed(time.Duration(float64(a.d) / scale))
}

// ParseAutoDuration reads auto or a duration with a unit (the forms of a
// config file, an override's value and the override API).
func ParseAutoDuration(s string) (AutoDuration, error) {
	if s == "auto" {
		return Automatic(), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return AutoDuration{}, fmt.Errorf("%q is neither auto nor a duration with a unit such as 90s", s)
	}
	return Fixed(d), nil
}

// autoDurationNode checks a YAML scalar for an AutoDuration before it is
// decoded, so the error names the key and line: nil when it decodes.
func autoDurationNode(n *yaml.Node) error {
	switch {
	case n.Kind != yaml.ScalarNode:
		return errors.New("must be auto or a duration with a unit, e.g. 90s")
	case (n.Tag == "!!int" || n.Tag == "!!float") && n.Value != "0":
		// A bare 0 is the one number without a unit, as for any duration.
		return fmt.Errorf("%s is a bare number; write a duration with a unit, e.g. %ss, or auto", n.Value, n.Value)
	}
	_, err := ParseAutoDuration(n.Value)
	return err
}

// UnmarshalYAML reads auto or a duration.
func (a *AutoDuration) UnmarshalYAML(n *yaml.Node) error {
	if err := autoDurationNode(n); err != nil {
		return err
	}
	v, err := ParseAutoDuration(n.Value)
	*a = v
	return err
}

// MarshalYAML writes auto or the duration, as the file would.
func (a AutoDuration) MarshalYAML() (any, error) { return a.String(), nil }

// MarshalJSON writes "auto" or the duration ("1m30s").
func (a AutoDuration) MarshalJSON() ([]byte, error) { return json.Marshal(a.String()) }

// UnmarshalJSON reads what MarshalJSON writes.
func (a *AutoDuration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want auto or a duration such as \"90s\": %w", err)
	}
	v, err := ParseAutoDuration(s)
	if err != nil {
		return err
	}
	*a = v
	return nil
}
