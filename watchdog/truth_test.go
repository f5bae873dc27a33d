package watchdog

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/state"
)

// #40: "cannot persist state" was logged at error level every cycle (22
// lines in 50 s) while the state file could not be written: once now,
// then a reminder every 10 minutes (util/faultlog).
func TestUnwritableStateIsLoggedOnceNotEveryCycle(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	store, err := state.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	// A directory where the file should be: every write fails at the
	// rename, with the random temp file's name in the error.
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, store, nil)
		r.engine.set(func(f *fakeEngine) { f.waiting, f.running, f.tokensPerSec = 2, 2, 100 })
		r.start()
		time.Sleep(50 * time.Second)
		r.stop()
		n := 0
		for _, e := range r.hook.AllEntries() {
			if strings.Contains(e.Message, "cannot persist state") {
				n++
				if e.Level != logrus.ErrorLevel {
					t.Errorf("logged at %s", e.Level)
				}
			}
		}
		if n != 1 {
			t.Fatalf("cannot persist state logged %d times in 50s, want once", n)
		}
	})
}

// #40: "the engine serves but something is odd" was logged while
// vigil's own recovery had just killed the frozen process: an endpoint
// that misbehaves during a recovery vigil runs is vigil's doing, and no
// verdict, page or /status says it.
func TestNoOddEndpointIsToldDuringVigilsOwnRecovery(t *testing.T) {
	for _, busy := range []bool{true, false} {
		t.Run(fmt.Sprintf("recovering=%v", busy), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, nil, nil)
				if busy {
					r.rec.busyUntil = time.Now().Add(time.Hour)
				}
				r.engine.set(func(f *fakeEngine) { f.waiting, f.running, f.tokensPerSec, f.healthRefused = 2, 2, 100, true })
				r.start()
				time.Sleep(time.Minute)
				r.stop()
				told := false
				for _, e := range r.hook.AllEntries() {
					if strings.Contains(e.Message, "something is odd") && e.Level <= logrus.InfoLevel {
						told = true
					}
				}
				if told == busy {
					t.Fatalf("odd endpoint told: %v, while vigil's recovery runs: %v", told, busy)
				}
				if v, _ := r.w.Current(); busy && len(v.Evidence.Odd) > 0 {
					t.Fatalf("the verdict /status and the pages read says odd during vigil's recovery: %v", v.Evidence.Odd)
				}
			})
		})
	}
}
