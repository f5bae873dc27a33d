package coord

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/pool"
)

const ttl = 2 * time.Second // etcd's minimum

func newSem(t *testing.T, endpoint, node string, max int) *Semaphore {
	t.Helper()
	s, err := New(Options{Endpoints: []string{endpoint}, Prefix: "/vigil/test/", LeaseTTL: ttl, Max: max, Timeout: time.Second, Node: node})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// acquireAsync asks for a place in the background; the channel yields the
// hold (or the error) and waiting the holders it queued behind.
type pending struct {
	done    chan error
	hold    *Hold
	mu      sync.Mutex
	waited  []Holder
	started time.Time
}

func acquireAsync(ctx context.Context, s *Semaphore, incident string) *pending {
	p := &pending{done: make(chan error, 1), started: time.Now()}
	go func() {
		h, err := s.Acquire(ctx, incident, func(hs []Holder) {
			p.mu.Lock()
			p.waited = hs
			p.mu.Unlock()
		})
		p.hold = h
		p.done <- err
	}()
	return p
}

func (p *pending) waitingBehind() []Holder {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waited
}

func mustNotFinish(t *testing.T, p *pending, d time.Duration, why string) {
	t.Helper()
	select {
	case err := <-p.done:
		t.Fatalf("%s: Acquire returned (%v) while it should wait", why, err)
	case <-time.After(d):
	}
}

func mustFinish(t *testing.T, p *pending, d time.Duration) *Hold {
	t.Helper()
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		return p.hold
	case <-time.After(d):
		t.Fatalf("Acquire still waiting after %s", d)
		return nil
	}
}

func TestTwoContendersExactlyOneHolds(t *testing.T) {
	t.Parallel() // each test has its own etcd
	e := testinfra.StartEtcd(t)
	a, b := newSem(t, e.Endpoint, "node1", 1), newSem(t, e.Endpoint, "node2", 1)
	ctx := context.Background()

	// Both hang in the same instant: exactly one gets the place.
	pa, pb := acquireAsync(ctx, a, "inc-a"), acquireAsync(ctx, b, "inc-b")
	var first *Hold
	var second *pending
	select {
	case err := <-pa.done:
		if err != nil {
			t.Fatal(err)
		}
		first, second = pa.hold, pb
	case err := <-pb.done:
		if err != nil {
			t.Fatal(err)
		}
		first, second = pb.hold, pa
	case <-time.After(5 * time.Second):
		t.Fatal("neither contender got the place")
	}
	mustNotFinish(t, second, 500*time.Millisecond, "the other contender")
	if w := second.waitingBehind(); len(w) != 1 || (w[0].Node != "node1" && w[0].Node != "node2") {
		t.Fatalf("the waiter was told it waits behind %v", w)
	}
	hs, err := a.Holders(ctx)
	if err != nil || len(hs) != 1 || hs[0].Key != first.Key {
		t.Fatalf("Holders = %v, %v; want the one holder %s", hs, err, first.Key)
	}

	// The holder restores and releases: the waiter proceeds at once.
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h := mustFinish(t, second, 2*time.Second)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMaxConcurrentRecoveries(t *testing.T) {
	t.Parallel() // each test has its own etcd
	e := testinfra.StartEtcd(t)
	ctx := context.Background()
	var holds []*Hold
	for _, n := range []string{"node1", "node2"} {
		h, err := newSem(t, e.Endpoint, n, 2).Acquire(ctx, "inc-"+n, nil)
		if err != nil {
			t.Fatal(err)
		}
		holds = append(holds, h)
	}
	third := acquireAsync(ctx, newSem(t, e.Endpoint, "node3", 2), "inc-3")
	mustNotFinish(t, third, 400*time.Millisecond, "a third member with max 2")
	if err := holds[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	mustFinish(t, third, 2*time.Second)
}

// The holder dies mid-recovery (its process gone: nothing renews or
// revokes its lease). Its hold expires with the lease and the other
// member proceeds.
func TestADeadHoldersPlaceExpiresWithItsLease(t *testing.T) {
	t.Parallel() // each test has its own etcd
	e := testinfra.StartEtcd(t)
	ctx := context.Background()
	dying := newSem(t, e.Endpoint, "node1", 1)
	h, err := dying.Acquire(ctx, "inc-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	other := acquireAsync(ctx, newSem(t, e.Endpoint, "node2", 1), "inc-2")
	mustNotFinish(t, other, 300*time.Millisecond, "while the holder lives")

	killed := time.Now()
	h.Orphan()
	dying.Close()
	mustFinish(t, other, ttl+3*time.Second)
	if d := time.Since(killed); d < ttl/2 {
		t.Fatalf("the place was free %s after the holder died, before its lease could expire", d)
	}
}

// vigil killed while holding, restarted within the TTL: it takes the hold
// back and keeps it past the old lease's TTL; restarted too late, the hold
// is gone and Resume says so.
func TestResumeAJournaledHold(t *testing.T) {
	t.Parallel() // each test has its own etcd
	e := testinfra.StartEtcd(t)
	ctx := context.Background()
	first := newSem(t, e.Endpoint, "node1", 1)
	h, err := first.Acquire(ctx, "inc-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	key, lease := h.Key, h.Lease
	h.Orphan()
	first.Close()

	next := newSem(t, e.Endpoint, "node1", 1)
	resumed, err := next.Resume(ctx, key, lease)
	if err != nil {
		t.Fatalf("Resume within the TTL: %v", err)
	}
	other := acquireAsync(ctx, newSem(t, e.Endpoint, "node2", 1), "inc-2")
	mustNotFinish(t, other, ttl+time.Second, "while the resumed hold is renewed")
	if err := resumed.Release(ctx); err != nil {
		t.Fatal(err)
	}
	h2 := mustFinish(t, other, 2*time.Second)

	// This one's vigil stays dead past the TTL.
	key, lease = h2.Key, h2.Lease
	h2.Orphan()
	time.Sleep(ttl + time.Second)
	if _, err := next.Resume(ctx, key, lease); !errors.Is(err, ErrExpired) {
		t.Fatalf("Resume after the TTL: %v, want ErrExpired", err)
	}
}

func TestEtcdStoppedAcquireFailsClearly(t *testing.T) {
	t.Parallel() // each test has its own etcd
	e := testinfra.StartEtcd(t)
	s := newSem(t, e.Endpoint, "node1", 1)
	e.Stop()
	start := time.Now()
	_, err := s.Acquire(context.Background(), "inc-1", nil)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Acquire with etcd stopped: %v, want ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), e.Endpoint) {
		t.Errorf("error %q does not name the endpoint %s", err, e.Endpoint)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Acquire took %s to fail; the timeout is 1s", d)
	}
}

// etcd goes away while a member waits for its place: the wait ends with
// ErrUnavailable once the lease cannot be renewed, never with a place.
func TestEtcdLostWhileWaiting(t *testing.T) {
	t.Parallel() // each test has its own etcd
	e := testinfra.StartEtcd(t)
	ctx := context.Background()
	if _, err := newSem(t, e.Endpoint, "node1", 1).Acquire(ctx, "inc-1", nil); err != nil {
		t.Fatal(err)
	}
	waiter := acquireAsync(ctx, newSem(t, e.Endpoint, "node2", 1), "inc-2")
	mustNotFinish(t, waiter, 300*time.Millisecond, "behind the holder")
	e.Stop()
	select {
	case err := <-waiter.done:
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("waiter: %v, want ErrUnavailable", err)
		}
	case <-time.After(ttl + 5*time.Second):
		t.Fatal("the waiter still waits with etcd gone")
	}
}

func TestCheckFloor(t *testing.T) {
	m := func(node, state string) pool.Member { return pool.Member{Node: node, State: state} }
	drained := m("node2", "healthy")
	drained.Drained = true
	gone := pool.Member{Node: "node3", Err: "connection refused"}
	for _, tc := range []struct {
		name       string
		peers      []pool.Member
		minServing int
		refuse     string
	}{
		{"two of three already unhealthy: refuse", []pool.Member{m("node2", "hung"), m("node3", "healthy")}, 2,
			"only 1 other member(s) would keep serving, min_serving is 2 (not serving: node2 hung)"},
		{"both peers serve", []pool.Member{m("node2", "healthy"), m("node3", "saturated")}, 2, ""},
		{"a drained or unreachable peer does not serve", []pool.Member{drained, gone}, 1,
			"only 0 other member(s) would keep serving, min_serving is 1 (not serving: node2 drained, node3 unreachable)"},
		{"loading does not serve", []pool.Member{m("node2", "loading")}, 1, "node2 loading"},
		{"floor off", []pool.Member{m("node2", "down")}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckFloor(tc.peers, tc.minServing)
			if tc.refuse == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrBelowFloor) || !strings.Contains(err.Error(), tc.refuse) {
				t.Fatalf("got %v, want a refusal containing %q", err, tc.refuse)
			}
		})
	}
}

func TestOptionsAndTLSFiles(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New without endpoints succeeded")
	}
	if _, err := New(Options{Endpoints: []string{"http://127.0.0.1:1"}, LeaseTTL: time.Second}); err == nil {
		t.Error("New with a 1s lease TTL succeeded")
	}
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	os.WriteFile(junk, []byte("not pem"), 0o600)
	for _, tc := range []struct{ ca, cert, key, want string }{
		{filepath.Join(dir, "missing.pem"), "", "", "ca_file"},
		{junk, "", "", "no PEM certificate"},
		{"", junk, "", "go together"},
		{"", junk, junk, "cert_file/key_file"},
	} {
		if _, err := TLSFromFiles(tc.ca, tc.cert, tc.key); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("TLSFromFiles(%q,%q,%q) = %v, want an error with %q", tc.ca, tc.cert, tc.key, err, tc.want)
		}
	}
	if c, err := TLSFromFiles("", "", ""); c != nil || err != nil {
		t.Errorf("no files: %v %v, want nil nil", c, err)
	}
}
