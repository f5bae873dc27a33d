package restarter

import (
	"context"
	"fmt"
	"strings"
)

// firstLine is a command's output as one line for an error.
func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// ctxErr prefers the context's error to the failure it caused: a command
// killed by its deadline says so, not just "signal: killed".
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}
