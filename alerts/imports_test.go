package alerts

import (
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

// The pager only needs the recovery's vocabulary (recovery.Step and its
// kin), never the recovery itself: importing actions would pull in the
// Docker client and everything it drags along into every binary that
// pages. go list answers for the package as built (test files aside), in
// one process.
func TestAlertsNeverImportsActionsOrDocker(t *testing.T) {
	deps := testinfra.Deps(t)
	for _, p := range deps {
		if p == "github.com/vigil-dev/vigil/actions" || strings.HasPrefix(p, "github.com/docker/") {
			t.Errorf("alerts depends on %s; the recovery's types belong in package recovery (recovery.Step, recovery.Reporter, recovery.Refusal)", p)
		}
	}
}
