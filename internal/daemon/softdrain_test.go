package daemon

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/vigil-dev/vigil/balancer"
)

// weights records the weights a drainer was set to.
type weights struct {
	balancer.NoDrain
	mu  sync.Mutex
	got []int
}

func (w *weights) SetWeight(_ context.Context, pct int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, pct)
	return nil
}

func (w *weights) seen() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.got)
}

// A suspicion lowers the node's weight and its end restores it, in order;
// a dry run tells the load balancer nothing.
func TestSoftDrainFollowsTheSuspicion(t *testing.T) {
	t.Parallel()
	lg, _ := test.NewNullLogger()
	for _, dry := range []bool{false, true} {
		w := &weights{}
		s := &softDrain{drainer: w, dryRun: dry, log: logrus.NewEntry(lg)}
		s.set(true)
		s.set(false)
		want := []int{softDrainWeight, 100}
		if dry {
			want = nil
		}
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) && len(w.seen()) < len(want) {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond) // no stale apply after the last
		got := w.seen()
		// The first apply may already see the second wish: then only the
		// restore is sent, which leaves the node as it should be.
		if !slices.Equal(got, want) && !(len(want) > 0 && slices.Equal(got, []int{100})) {
			t.Errorf("dry run %v: weights %v, want %v", dry, got, want)
		}
	}
}
