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

// The queue lists the holders and then the waiting members in the order
// they asked, the order their turns come in.
func TestQueueListsHoldersThenWaitersInOrder(t *testing.T) {
	e := testinfra.StartEtcd(t)
	ctx := t.Context()
	sems := map[string]*Semaphore{}
	for _, n := range []string{"node1", "node2", "node3", "node4"} {
		sems[n] = newSem(t, e.Endpoint, n, 2)
	}
	for _, n := range []string{"node1", "node2"} {
		if _, err := sems[n].Acquire(ctx, "inc-"+n, nil); err != nil {
			t.Fatal(err)
		}
	}
	p4 := acquireAsync(ctx, sems["node4"], "inc-node4")
	mustNotFinish(t, p4, 200*time.Millisecond, "node4 queued")
	p3 := acquireAsync(ctx, sems["node3"], "inc-node3")
	mustNotFinish(t, p3, 200*time.Millisecond, "node3 queued")
	q, err := sems["node1"].Queue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var holding, waiting []string
	for _, h := range q.Holding {
		holding = append(holding, h.Node)
	}
	for _, h := range q.Waiting {
		waiting = append(waiting, h.Node+" "+h.Incident)
	}
	if q.Max != 2 || strings.Join(holding, ",") != "node1,node2" || strings.Join(waiting, ",") != "node4 inc-node4,node3 inc-node3" {
		t.Errorf("queue max %d holding %v waiting %v; want 2, [node1 node2], [node4 inc-node4 node3 inc-node3]", q.Max, holding, waiting)
	}
}
