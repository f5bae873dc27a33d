package coord

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

// A holder cut off from etcd mid-recovery loses its lease, and etcd hands
// its place on while the holder is still drained. The next turn, granted
// by etcd, waits until the drained member is back in rotation: at most
// max_concurrent_recoveries out at once (bench/fleet's partition
// scenario: 10 out with a limit of 5 before).
func TestTurnWaitsWhileAHolderCutOffFromEtcdIsStillDrained(t *testing.T) {
	e := testinfra.StartEtcd(t)
	ctx := t.Context()
	a := newSem(t, e.Endpoint, "node1", 1)
	b := newSem(t, e.Endpoint, "node2", 1)

	var mu sync.Mutex
	drained := []string{"node1"}
	peersDrained := func(context.Context) []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), drained...)
	}
	held, err := Turns(a).Acquire(ctx, "inc-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	// node1's lease is gone (as when it expires while node1 cannot reach
	// etcd); node1 itself is still drained.
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}

	var said []string
	type result struct{ err error }
	done := make(chan result, 1)
	go func() {
		h, err := TurnsWith(b, TurnOptions{Drained: peersDrained, Poll: 50 * time.Millisecond}).Acquire(ctx, "inc-2", func(s string) {
			mu.Lock()
			said = append(said, s)
			mu.Unlock()
		})
		if h != nil {
			_ = h.Release(context.WithoutCancel(ctx))
		}
		done <- result{err}
	}()
	select {
	case r := <-done:
		t.Fatalf("node2 got the turn (%v) while node1 is still drained: 2 out with a limit of 1", r.err)
	case <-time.After(500 * time.Millisecond):
	}
	mu.Lock()
	if len(said) == 0 || !strings.Contains(said[len(said)-1], "node1 drained without a turn in etcd") {
		t.Errorf("waiting was told %q; want it to name node1 drained without a turn", said)
	}
	drained = nil // node1 back in rotation
	mu.Unlock()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Acquire: %v", r.err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("node2 still waiting after node1 came back")
	}
	hs, err := b.Holders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 0 {
		t.Errorf("holders after release: %v", hs)
	}
}

// Waiting for room ends with ctx, and gives the place back.
func TestTurnWaitingForRoomGivesThePlaceBack(t *testing.T) {
	e := testinfra.StartEtcd(t)
	b := newSem(t, e.Endpoint, "node2", 1)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := TurnsWith(b, TurnOptions{Drained: func(context.Context) []string { return []string{"node1"} }, Poll: 20 * time.Millisecond}).
		Acquire(ctx, "inc", nil)
	if err == nil {
		t.Fatal("granted a turn with node1 drained and a limit of 1")
	}
	hs, err := b.Holders(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 0 {
		t.Errorf("the place stayed held after the wait ended: %v", hs)
	}
}
