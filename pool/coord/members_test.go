package coord

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

// view follows one vigil's WatchMembers.
type view struct {
	mu   sync.Mutex
	last []Registered
	err  error
}

func watch(t *testing.T, s *Semaphore) *view {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	v := &view{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.WatchMembers(ctx, func(rs []Registered, err error) {
			v.mu.Lock()
			v.last, v.err = rs, err
			v.mu.Unlock()
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return v
}

func (v *view) String() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var b []string
	for _, r := range v.last {
		b = append(b, r.Node+"="+r.URL)
	}
	return strings.Join(b, " ")
}

// waitView waits until the view reads want ("node=url node=url", sorted).
func (v *view) wait(t *testing.T, want string, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if v.String() == want {
			return time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("members %q after %s, want %q", v.String(), within, want)
	return time.Time{}
}

// register runs Register until the returned stop is called; outcomes are
// recorded.
type registration struct {
	stop     context.CancelFunc
	done     chan struct{}
	mu       sync.Mutex
	outcomes []error
}

func register(s *Semaphore, url string) *registration {
	ctx, cancel := context.WithCancel(context.Background())
	r := &registration{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		s.Register(ctx, url, func(err error) {
			r.mu.Lock()
			r.outcomes = append(r.outcomes, err)
			r.mu.Unlock()
		})
	}()
	return r
}

func (r *registration) end() { r.stop(); <-r.done }

func (r *registration) lastOutcome() (error, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.outcomes) == 0 {
		return nil, false
	}
	return r.outcomes[len(r.outcomes)-1], true
}

func TestTwoRegistrationsSeeEachOther(t *testing.T) {
	t.Parallel() // each test has its own etcd
	e := testinfra.StartEtcd(t)
	a, b := newSem(t, e.Endpoint, "node1", 1), newSem(t, e.Endpoint, "node2", 1)
	ra, rb := register(a, "http://127.0.0.1:9101/status"), register(b, "http://127.0.0.1:9102/status")
	defer ra.end()
	both := "node1=http://127.0.0.1:9101/status node2=http://127.0.0.1:9102/status"
	watch(t, a).wait(t, both, 3*time.Second)
	vb := watch(t, b)
	vb.wait(t, both, 3*time.Second)
	if err, ok := rb.lastOutcome(); !ok || err != nil {
		t.Errorf("node2's registration reported %v (reported: %t), want nil", err, ok)
	}

	// node2 stops: it revokes its lease and is gone at once, well within
	// the TTL.
	stopped := time.Now()
	rb.end()
	vb.wait(t, "node1=http://127.0.0.1:9101/status", time.Second)
	if d := time.Since(stopped); d > ttl/2 {
		t.Errorf("a stopped member took %s to leave the directory", d)
	}
}

// A vigil killed (nothing renews its lease, nothing revokes it) leaves the
// directory when its lease expires, not before.
func TestAKilledMemberDisappearsWithItsLease(t *testing.T) {
	t.Parallel() // each test has its own etcd
	e := testinfra.StartEtcd(t)
	dying := newSem(t, e.Endpoint, "node1", 1)
	other := newSem(t, e.Endpoint, "node2", 1)
	rd := register(dying, "http://127.0.0.1:9101/status")
	ro := register(other, "http://127.0.0.1:9102/status")
	defer ro.end()
	v := watch(t, other)
	v.wait(t, "node1=http://127.0.0.1:9101/status node2=http://127.0.0.1:9102/status", 3*time.Second)

	killed := time.Now()
	dying.Close() // its keep-alives stop, as when the process dies
	gone := v.wait(t, "node2=http://127.0.0.1:9102/status", ttl+3*time.Second)
	if d := gone.Sub(killed); d < ttl/2 {
		t.Errorf("the killed member left the directory %s after its death, before its lease could expire", d)
	}
	rd.end()
}

func TestRegistrationNameTakenAndRestart(t *testing.T) {
	t.Parallel() // each test has its own etcd
	e := testinfra.StartEtcd(t)
	first := newSem(t, e.Endpoint, "node1", 1)
	r1 := register(first, "http://127.0.0.1:9101/status")
	v := watch(t, first)
	v.wait(t, "node1=http://127.0.0.1:9101/status", 3*time.Second)

	// Another vigil under the same name: refused, the first stays.
	twin := newSem(t, e.Endpoint, "node1", 1)
	rt := register(twin, "http://127.0.0.1:9999/status")
	deadline := time.Now().Add(3 * time.Second)
	for {
		if err, ok := rt.lastOutcome(); ok {
			if !errors.Is(err, ErrNameTaken) || !strings.Contains(err.Error(), "http://127.0.0.1:9101/status") {
				t.Fatalf("the twin's registration: %v, want ErrNameTaken naming the first's URL", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the twin's registration reported nothing")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rt.end()
	if got := v.String(); got != "node1=http://127.0.0.1:9101/status" {
		t.Fatalf("after the twin: %q", got)
	}

	// The same vigil killed and started again within the TTL takes its
	// key over, and keeps it past the old lease's expiry.
	first.Close()
	r1.end()
	again := newSem(t, e.Endpoint, "node1", 1)
	r2 := register(again, "http://127.0.0.1:9101/status")
	defer r2.end()
	deadline = time.Now().Add(3 * time.Second)
	for {
		if err, ok := r2.lastOutcome(); ok {
			if err != nil {
				t.Fatalf("restarted vigil's registration: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the restarted vigil's registration reported nothing")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(ttl + time.Second)
	members, _, err := again.Members(context.Background())
	if err != nil || len(members) != 1 || members[0].Node != "node1" {
		t.Fatalf("after the old lease's TTL: %v, %v; want node1 still registered", members, err)
	}
}

func TestRegisterWithEtcdDownReportsAndKeepsTrying(t *testing.T) {
	t.Parallel() // each test has its own etcd
	e := testinfra.StartEtcd(t)
	s := newSem(t, e.Endpoint, "node1", 1)
	e.Stop()
	r := register(s, "http://127.0.0.1:9101/status")
	deadline := time.Now().Add(4 * time.Second)
	for {
		if err, ok := r.lastOutcome(); ok {
			if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), e.Endpoint) {
				t.Fatalf("registration with etcd down: %v, want ErrUnavailable naming %s", err, e.Endpoint)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("registration with etcd down reported nothing")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ended := time.Now()
	r.end()
	if d := time.Since(ended); d > 2*time.Second {
		t.Errorf("Register took %s to return after its context ended", d)
	}
}
