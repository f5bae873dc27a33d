package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/internal/testinfra/simengine"
)

// Two instances run side by side on one machine, each with its own ports
// and state directory.
func TestTwoInstancesRunSideBySide(t *testing.T) {
	type running struct {
		td    *testDaemon
		state string
	}
	var rs []running
	for n := range 2 {
		s := simengine.Start(t, nil)
		state := filepath.Join(t.TempDir(), fmt.Sprintf("gpu%d", n), "state.json")
		yml := testinfra.DaemonConfig(t, s.URL())
		yml = replaceLine(yml, "  state_file: ", "  state_file: "+state)
		rs = append(rs, running{startDaemon(t, yml), state})
	}
	for _, r := range rs {
		getBody(t, r.td.statusURL+"/healthz")
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, r := range rs {
		for {
			if _, err := os.Stat(r.state); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no state file %s", r.state)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if rs[0].td.statusURL == rs[1].td.statusURL || rs[0].td.proxyURL == rs[1].td.proxyURL {
		t.Fatal("the instances share a listener")
	}
}
