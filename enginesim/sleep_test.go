package enginesim

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

// vLLM's sleep mode: asleep, nothing steps and /is_sleeping says so;
// woken, the held request finishes.
func TestSleepHoldsWorkUntilWakeUpAndIsSleepingSaysSo(t *testing.T) {
	e, ts := startEngine(t, fastConfig())
	isSleeping := func() bool {
		t.Helper()
		resp, err := http.Get(ts.URL + "/is_sleeping")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ans struct {
			IsSleeping bool `json:"is_sleeping"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
			t.Fatal(err)
		}
		return ans.IsSleeping
	}
	if isSleeping() {
		t.Fatal("a fresh engine says it is asleep")
	}
	if resp, err := http.Post(ts.URL+"/sleep", "", nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /sleep: %v %v", resp, err)
	}
	if !isSleeping() {
		t.Fatal("/is_sleeping false after POST /sleep")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	load(t, ctx, ts.URL, 1, `{"prompt":"x","max_tokens":4}`)
	testinfra.WaitFor(t, 5*time.Second, "the request to arrive", func() bool { return e.Stats().Pending == 1 })
	time.Sleep(50 * time.Millisecond)
	if st := e.Stats(); st.GenerationTokens != 0 {
		t.Fatalf("an asleep engine generated %d tokens", st.GenerationTokens)
	}
	if resp, err := http.Post(ts.URL+"/wake_up", "", nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /wake_up: %v %v", resp, err)
	}
	testinfra.WaitFor(t, 5*time.Second, "the held request to finish", func() bool { return e.Stats().GenerationTokens == 4 })
	if isSleeping() {
		t.Fatal("/is_sleeping true after POST /wake_up")
	}
}
