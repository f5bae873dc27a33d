package restarter

import (
	"os"
	"testing"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

// TestMain stops the test binary's dockerd (started on first use by the
// Docker tests) when the tests end, pass or fail.
func TestMain(m *testing.M) { os.Exit(testinfra.Run(m)) }
