package recoverer

import (
	"errors"
)

// Stuck marks err, a failed readiness check, as coming from an engine that
// answers /v1/models but does not complete a request: up and hung, not
// loading. A resumed recovery reads it as evidence that a restart begun
// before vigil stopped never ran. The message is err's.
func Stuck(err error) error {
	if err == nil {
		return nil
	}
	return stuckError{err}
}

// IsStuck reports whether err (or an error it wraps) was marked by Stuck.
func IsStuck(err error) bool {
	var s stuckError
	return errors.As(err, &s)
}

type stuckError struct{ err error }

func (s stuckError) Error() string { return s.err.Error() }
func (s stuckError) Unwrap() error { return s.err }
