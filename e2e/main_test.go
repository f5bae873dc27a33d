package e2e_test

import (
	"os"
	"testing"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

// TestMain stops the test binary's one dockerd (shared by every test, and
// started on first use) when the tests end, pass or fail.
func TestMain(m *testing.M) { os.Exit(testinfra.Run(m)) }
