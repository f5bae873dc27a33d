package testinfra

import (
	"fmt"
	"path/filepath"
	"testing"
)

// DaemonConfig is a vigil config with fast settings aimed at engineURL:
// a 200 ms cycle, a 2 s hang window, its state file in a temporary
// folder, the admission and status listeners on free loopback ports.
func DaemonConfig(t testing.TB, engineURL string) string {
	return fmt.Sprintf(`node: test-node
engine:
  url: %s
  request_timeout: 1s
watchdog:
  interval: 200ms
  hang_after: 2s
  probe_timeout: 1s
  probe_slo: 500ms
  state_file: %s
admission:
  listen: %s
  shutdown_grace: 2s
status:
  listen: %s
`, engineURL, filepath.Join(t.TempDir(), "state.json"), FreeAddr(t), FreeAddr(t))
}
