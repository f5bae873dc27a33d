package recoverer

import (
	"testing"
	"time"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/testinfra"
)

// The real load balancers the recovery drives in its tests, set up as
// the balancer package's own tests set them up.

// startAgent serves an agent-check endpoint until the test ends.
func startAgent(t *testing.T, expect int, within time.Duration) *balancer.Agent {
	t.Helper()
	a, err := balancer.NewAgent(configs.Agent{Listen: "127.0.0.1:0", ExpectPolls: expect, ExpectWithin: within}, nil)
	if err != nil {
		t.Fatal(err)
	}
	testinfra.Serve(t, a)
	return a
}
