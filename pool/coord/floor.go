package coord

import (
	"errors"
	"fmt"
	"strings"

	"github.com/vigil-dev/vigil/pool"
)

// ErrBelowFloor is wrapped by CheckFloor's refusal.
var ErrBelowFloor = errors.New("below the capacity floor")

// Serving reports whether a peer counts as serving for the floor: read,
// not drained by vigil, and judged healthy or saturated (a saturated
// engine serves at full speed). Loading, hung, down, unknown and
// unreachable members do not serve.
func Serving(m pool.Member) bool {
	return m.Reachable() && !m.Drained && (m.State == "healthy" || m.State == "saturated")
}

// CheckFloor refuses a drain of this member when fewer than minServing of
// the peers would keep serving. minServing 0 disables it.
func CheckFloor(peers []pool.Member, minServing int) error {
	if minServing <= 0 {
		return nil
	}
	serving := 0
	var others []string
	for _, m := range peers {
		if Serving(m) {
			serving++
			continue
		}
		why := m.State
		switch {
		case !m.Reachable():
			why = "unreachable"
		case m.Drained:
			why = "drained"
		case why == "":
			why = "no verdict"
		}
		others = append(others, m.Node+" "+why)
	}
	if serving >= minServing {
		return nil
	}
	msg := fmt.Sprintf("only %d other member(s) would keep serving, min_serving is %d", serving, minServing)
	if len(others) > 0 {
		msg += " (not serving: " + strings.Join(others, ", ") + ")"
	}
	return fmt.Errorf("%w: %s", ErrBelowFloor, msg)
}
