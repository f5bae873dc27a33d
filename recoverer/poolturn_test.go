package recoverer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-dev/vigil/recovery"
)

// fakeCoord is the pool's turn as etcd keeps it, in memory: turns held by
// key, "acquire"/"resume"/"release" recorded among the world's calls so
// their order against the drain and the restart shows.
type fakeCoord struct {
	w       *world
	held    map[string]bool
	n       int
	err     error           // Acquire and Resume fail with it (etcd unreachable)
	blocked bool            // Acquire waits until ctx ends (others hold every turn)
	expired bool            // Resume finds the lease gone
	resumed []recovery.Turn // what Resume was asked for
	holders string          // what a blocked Acquire says holds the turn
}

type fakeHold struct {
	c *fakeCoord
	t recovery.Turn
}

func (h fakeHold) Turn() recovery.Turn { return h.t }
func (h fakeHold) Release(context.Context) error {
	h.c.w.mu.Lock()
	defer h.c.w.mu.Unlock()
	h.c.w.call("turn release")
	delete(h.c.held, h.t.Key)
	return nil
}

func (c *fakeCoord) Acquire(ctx context.Context, incident string, waiting func(string)) (recovery.TurnHold, error) {
	c.w.mu.Lock()
	if c.w.call("turn acquire") {
		c.w.mu.Unlock()
		return nil, errKilled
	}
	err, blocked := c.err, c.blocked
	c.w.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if blocked {
		waiting(c.holders)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	c.n++
	t := recovery.Turn{Key: fmt.Sprintf("/vigil/recovery/%d", c.n), Lease: int64(c.n)}
	c.held[t.Key] = true
	return fakeHold{c, t}, nil
}

func (c *fakeCoord) Resume(_ context.Context, t recovery.Turn) (recovery.TurnHold, error) {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	c.w.call("turn resume")
	c.resumed = append(c.resumed, t)
	if c.err != nil {
		return nil, c.err
	}
	if c.expired || !c.held[t.Key] {
		delete(c.held, t.Key)
		return nil, errors.New("hold expired with its lease")
	}
	return fakeHold{c, t}, nil
}

func coordHarness(t *testing.T, tweak func(c *fakeCoord, o *Options)) (*harness, *fakeCoord) {
	var c *fakeCoord
	h := newHarness(t, func(o *Options) {
		c = &fakeCoord{held: map[string]bool{}}
		o.Coordinator = c
		if tweak != nil {
			tweak(c, o)
		}
	})
	c.w = h.w
	return h, c
}

func TestRecoveryTakesThePoolsTurnFromDrainToRestore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, c := coordHarness(t, nil)
		// Another member drained at the same load balancer does not stop a
		// member holding its turn: the turn is the lock (two HAProxy
		// instances have no single state to read).
		h.w.others[0].Drained, h.w.others[0].Status = true, "DRAIN"
		inc, v := hungIncident()
		h.rec.Recover(context.Background(), inc, v)
		h.rec.Wait()
		if got, want := strings.Join(h.w.mutating(), ","),
			"turn acquire,drain,restart,weight 10,ready,weight 25,weight 50,weight 100,turn release"; got != want {
			t.Fatalf("changes %s, want %s", got, want)
		}
		if got := joined(h.rep.names()); !strings.HasPrefix(got, "pool_turn,drain,") || !strings.HasSuffix(got, "resolved") {
			t.Errorf("reported %s", got)
		}
		if j := h.journal(t); j.Turn != nil || len(c.held) != 0 {
			t.Errorf("after the restore: journal turn %+v, held %v; want given back", j.Turn, c.held)
		}
	})
}

func TestRecoveryWithoutThePoolsTurnDoesNotDrain(t *testing.T) {
	unreachable := errors.New("etcd unavailable at http://10.0.0.5:2379: grant a lease: context deadline exceeded")
	for _, tc := range []struct {
		name    string
		tweak   func(c *fakeCoord, o *Options)
		guard   recovery.Guard
		detail  string
		changes string
	}{
		{name: "etcd unreachable: no drain, a page saying why",
			tweak: func(c *fakeCoord, o *Options) { c.err = unreachable },
			guard: recovery.GuardCoordinator, detail: "cannot take the pool's turn (etcd unavailable at http://10.0.0.5:2379", changes: "turn acquire"},
		{name: "every turn held for longer than turn_wait",
			tweak: func(c *fakeCoord, o *Options) { c.blocked, c.holders = true, "node1 (incident inc-9)" },
			guard: recovery.GuardCoordinator, detail: "still waiting for the pool's turn after 10m0s: node1 (incident inc-9) holds it", changes: "turn acquire"},
		{name: "min_serving: two of three members already unhealthy",
			tweak: func(c *fakeCoord, o *Options) {
				o.Floor = func(context.Context) error {
					return errors.New("below the capacity floor: only 0 other member(s) would keep serving, min_serving is 1 (not serving: node1 hung, node3 down)")
				}
			},
			guard: recovery.GuardCapacityFloor, detail: "not draining: below the capacity floor", changes: ""},
		{name: "min_serving: the floor held before the wait for the turn, not once it came",
			tweak: func(c *fakeCoord, o *Options) {
				reads := 0
				o.Floor = func(context.Context) error {
					// Read before the wait (fine), then after the turn
					// came, by which time more members hung.
					if reads++; reads%2 == 1 {
						return nil
					}
					return errors.New("below the capacity floor: only 0 other member(s) would keep serving, min_serving is 1 (not serving: node1 hung, node3 hung)")
				}
			},
			guard: recovery.GuardCapacityFloor, detail: "read again once the pool's turn came", changes: "turn acquire,turn release"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, _ := coordHarness(t, tc.tweak)
				inc, v := hungIncident()
				h.rec.Recover(context.Background(), inc, v)
				h.rec.Wait()
				if got := strings.Join(h.w.mutating(), ","); got != tc.changes {
					t.Fatalf("changes %q, want %q", got, tc.changes)
				}
				ref, ok := h.rep.find(recovery.StepGuardRefused)
				if !ok || ref.Guard != tc.guard || !strings.Contains(ref.Detail, tc.detail) || !strings.Contains(ref.Detail, "still takes traffic") {
					t.Fatalf("refusal %+v, want guard %s saying %q", ref, tc.guard, tc.detail)
				}
				// vigil keeps watching: the next attempt asks again, and the
				// same refusal is not paged twice.
				time.Sleep(h.rec.Snapshot().NextAttempt.Sub(time.Now()) + time.Second)
				h.rec.Recover(context.Background(), inc, v)
				h.rec.Wait()
				n := 0
				for _, s := range h.rep.names() {
					if s == recovery.StepGuardRefused {
						n++
					}
				}
				if n != 1 || h.w.self.Drained {
					t.Errorf("after a second attempt: %d refusals paged, host drained %v", n, h.w.self.Drained)
				}
			})
		})
	}

	t.Run("drain_without_coordinator: etcd unreachable, the load balancer's guard alone", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h, _ := coordHarness(t, func(c *fakeCoord, o *Options) { c.err, o.DrainWithoutCoordinator = unreachable, true })
			inc, v := hungIncident()
			h.rec.Recover(context.Background(), inc, v)
			h.rec.Wait()
			if got := strings.Join(h.w.mutating(), ","); !strings.HasPrefix(got, "turn acquire,drain,restart") {
				t.Fatalf("changes %s, want a drain and restart", got)
			}
			s, _ := h.rep.find(recovery.StepTurn)
			if !strings.Contains(s.Err, "etcd unavailable") || !strings.Contains(s.Detail, "drain_without_coordinator") {
				t.Errorf("the page does not say it drains without the coordinator: %+v", s)
			}
		})
	})
}

// vigil killed while holding the turn: the next vigil takes back the
// journaled turn (or a new one if the lease expired meanwhile), finishes
// the recovery and gives it back; the turn is never kept past the restore.
func TestRecoveryKilledWhileHoldingTheTurn(t *testing.T) {
	for _, expired := range []bool{false, true} {
		t.Run(fmt.Sprintf("lease expired %v", expired), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, c := coordHarness(t, nil)
				h.recoverUntilKilled("restart#1:before")
				j := h.journal(t)
				if j.Turn == nil || !c.held[j.Turn.Key] {
					t.Fatalf("journal after the kill: turn %+v (held %v), want the held turn", j.Turn, c.held)
				}
				held := *j.Turn

				h.w.mu.Lock()
				h.w.dead, h.w.kill = false, nil
				c.expired = expired
				h.w.mu.Unlock()
				rec2 := h.newRecovery(t)
				if err := rec2.Resume(context.Background()); err != nil {
					t.Fatal(err)
				}
				rec2.Wait()
				if len(c.resumed) != 1 || c.resumed[0] != held {
					t.Fatalf("Resume asked for %v, want the journaled %v", c.resumed, held)
				}
				want := "turn acquire,drain,restart,turn resume,restart,"
				if expired {
					want = "turn acquire,drain,restart,turn resume,turn acquire,restart,"
				}
				got := strings.Join(h.w.mutating(), ",")
				if !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "weight 100,turn release") {
					t.Fatalf("changes %s, want %s... ending with the release", got, want)
				}
				if j := h.journal(t); j.Turn != nil || len(c.held) != 0 || j.Step != recovery.StepResolved {
					t.Errorf("after the resumed recovery: journal %s turn %+v, held %v", j.Step, j.Turn, c.held)
				}
			})
		})
	}
}
