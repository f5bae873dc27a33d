package daemon

import (
	"slices"
	"testing"

	"github.com/vigil-dev/vigil/configs"
)

// Every live key of the config's table reaches a running part, and
// nothing is applied live that the table does not name.
func TestEveryLiveKeyIsApplied(t *testing.T) {
	var keys []string
	for _, k := range configs.LiveKeys() {
		keys = append(keys, k.Key)
		if liveApply[k.Key] == nil {
			t.Errorf("%s is live in configs but liveApply has no applier for it", k.Key)
		}
	}
	for key := range liveApply {
		if !slices.Contains(keys, key) {
			t.Errorf("liveApply applies %s, which configs.LiveKeys does not name", key)
		}
	}
}
