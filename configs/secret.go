package configs

import (
	"fmt"
	"os"
	"strings"
)

// Secret holds a credential read from a file or the environment. It never
// prints, logs or marshals its value: String, GoString, MarshalText and
// MarshalJSON all give "<redacted>" (or "" when empty).
type Secret string

const redacted = "<redacted>"

// Value returns the secret itself, for the one place that sends it.
func (s Secret) Value() string { return string(s) }

func (s Secret) mask() string {
	if s == "" {
		return ""
	}
	return redacted
}

// String implements fmt.Stringer without revealing the value.
func (s Secret) String() string { return s.mask() }

// GoString keeps %#v from revealing the value.
func (s Secret) GoString() string { return fmt.Sprintf("configs.Secret(%q)", s.mask()) }

// MarshalText keeps encoders (JSON, YAML, logrus) from revealing the value.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.mask()), nil }

// SecretSource names where a secret comes from: a file, or an environment
// variable. Setting both is an error; setting neither means "no secret".
type SecretSource struct {
	File string `yaml:"file"`
	Env  string `yaml:"env"`
}

// IsSet reports whether either source is configured.
func (s SecretSource) IsSet() bool { return s.File != "" || s.Env != "" }

// Resolve reads the secret. A file's trailing newline is trimmed. An empty
// result from a configured source is an error: a key that silently reads
// as empty is how a 401 storm starts.
func (s SecretSource) Resolve() (Secret, error) {
	switch {
	case s.File != "" && s.Env != "":
		return "", fmt.Errorf("set file or env, not both")
	case s.File != "":
		b, err := os.ReadFile(s.File)
		if err != nil {
			return "", fmt.Errorf("read secret file: %w", err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("secret file %s is empty", s.File)
		}
		return Secret(v), nil
	case s.Env != "":
		v := strings.TrimSpace(os.Getenv(s.Env))
		if v == "" {
			return "", fmt.Errorf("environment variable %s is empty or unset", s.Env)
		}
		return Secret(v), nil
	}
	return "", nil
}
