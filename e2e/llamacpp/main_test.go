package llamacpp_test

import (
	"os"
	"testing"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

// TestMain removes the vigil binary testinfra builds once for every test.
func TestMain(m *testing.M) { os.Exit(testinfra.Run(m)) }
