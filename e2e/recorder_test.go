package e2e_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// observation is what a recorder keeps: a moment's reading, when it was
// taken, and what of it counts as a change.
type observation interface {
	when() time.Time
	key() string
	String() string
}

// recorder samples every period until the test ends and keeps each
// reading whose key differs from the last one kept, so a state that lasts
// only a moment (DRAIN, a ramp weight) is still seen; if the test failed
// it logs them, change by change.
type recorder[O observation] struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	hist []O
}

// record starts sampling; sample's false is a reading that failed and is
// not kept. title heads the logged changes.
func record[O observation](t *testing.T, period time.Duration, title string, sample func() (O, bool)) *recorder[O] {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder[O]{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			if o, ok := sample(); ok {
				r.mu.Lock()
				if n := len(r.hist); n == 0 || r.hist[n-1].key() != o.key() {
					r.hist = append(r.hist, o)
				}
				r.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		r.stop()
		if t.Failed() {
			t.Logf("%s, change by change:\n%s", title, r.timeline())
		}
	})
	return r
}

func (r *recorder[O]) stop() {
	r.cancel()
	<-r.done
}

// changes is every reading kept so far.
func (r *recorder[O]) changes() []O {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]O(nil), r.hist...)
}

// all returns the readings at or after since that f accepts.
func (r *recorder[O]) all(since time.Time, f func(O) bool) []O {
	var res []O
	for _, o := range r.changes() {
		if !o.when().Before(since) && f(o) {
			res = append(res, o)
		}
	}
	return res
}

// waitFor waits up to within for a reading at or after since that f
// accepts, and returns it.
func (r *recorder[O]) waitFor(t *testing.T, within time.Duration, what string, since time.Time, f func(O) bool) O {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if got := r.all(since, f); len(got) > 0 {
			return got[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("never saw %s within %s", what, within)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (r *recorder[O]) timeline() string {
	var b strings.Builder
	for _, o := range r.changes() {
		b.WriteString(o.String())
		b.WriteByte('\n')
	}
	return b.String()
}
