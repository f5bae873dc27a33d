package alerts

import (
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

// The pager only needs the recovery's vocabulary (recovery.Step and its
// kin), never the recovery itself: importing the sequence or its
// restarters would pull in the Docker client and everything it drags
// along into every binary that pages. go list answers for the package as built (test files aside), in
// one process.
func TestAlertsNeverImportsTheSequenceOrDocker(t *testing.T) {
	forbidden := map[string]bool{
		"github.com/vigil-dev/vigil/recoverer": true,
		"github.com/vigil-dev/vigil/restarter": true,
		"github.com/vigil-dev/vigil/balancer":  true,
	}
	for _, p := range testinfra.Deps(t) {
		if forbidden[p] || strings.HasPrefix(p, "github.com/docker/") {
			t.Errorf("alerts depends on %s; the recovery's types belong in package recovery (recovery.Step, recovery.Reporter, recovery.Refusal)", p)
		}
	}
}
