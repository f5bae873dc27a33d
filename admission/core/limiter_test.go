package core

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

// acquired is what one Acquire returned.
type acquired struct {
	lis *Listener
	rj  *Rejection
	err error
}

// acquireAsync runs Acquire in its own goroutine (it blocks while queued).
func acquireAsync(ctx context.Context, l *Limiter, r Request) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		lis, rj, err := l.Acquire(ctx, r)
		ch <- acquired{lis, rj, err}
	}()
	return ch
}

// untilQueued waits until every goroutine of the test's bubble
// (testing/synctest) is blocked, then checks that n requests wait.
func untilQueued(t *testing.T, l *Limiter, n int) {
	t.Helper()
	synctest.Wait()
	if d := l.Stats().QueueDepth; d != n {
		t.Fatalf("queue depth %d, want %d", d, n)
	}
}

func get(t *testing.T, ch <-chan acquired) acquired {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(2 * time.Second):
		t.Fatal("Acquire did not return")
		return acquired{}
	}
}

func mustAcquire(t *testing.T, l *Limiter, r Request) *Listener {
	t.Helper()
	lis, rj, err := l.Acquire(context.Background(), r)
	if err != nil || rj != nil {
		t.Fatalf("Acquire: %v %v", err, rj)
	}
	return lis
}

// TestAcquireDecides is the core's API in one table: what Acquire answers
// in each situation, and what the Listener's end does.
func TestAcquireDecides(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*configs.Admission)
		run  func(t *testing.T, l *Limiter)
	}{
		{"a free slot admits at once", nil, func(t *testing.T, l *Limiter) {
			mustAcquire(t, l, Request{Tokens: 1})
			if s := l.Stats(); s.InFlight != 1 || s.Admitted != 1 || s.Queued != 0 {
				t.Errorf("in flight %d, admitted %d, queued %d; want 1, 1, 0", s.InFlight, s.Admitted, s.Queued)
			}
		}},
		{"a full cap without a queue rejects at once, as capacity", func(c *configs.Admission) { c.MaxInFlight, c.MaxQueue = 1, 0 },
			func(t *testing.T, l *Limiter) {
				mustAcquire(t, l, Request{})
				_, rj, err := l.Acquire(context.Background(), Request{})
				if err != nil || rj == nil || rj.Reason != ReasonQueueFull || rj.RateLimited() || rj.Wait <= 0 {
					t.Fatalf("got %+v %v, want a queue_full rejection (503) with a wait", rj, err)
				}
			}},
		{"a released slot goes to the waiter", func(c *configs.Admission) { c.MaxInFlight = 1 },
			func(t *testing.T, l *Limiter) {
				first := mustAcquire(t, l, Request{})
				ch := acquireAsync(context.Background(), l, Request{})
				untilQueued(t, l, 1)
				first.Release(Outcome{Success: true, CompletionTokens: -1, TotalTokens: -1})
				if a := get(t, ch); a.lis == nil {
					t.Fatalf("the waiter got %+v, want a slot", a)
				}
				if s := l.Stats(); s.InFlight != 1 || s.Queued != 1 || s.CompletionRate <= 0 {
					t.Errorf("in flight %d, queued %d, completion rate %v; want 1, 1, > 0", s.InFlight, s.Queued, s.CompletionRate)
				}
			}},
		{"a wait is cut to half the client's timeout", func(c *configs.Admission) { c.MaxInFlight = 1 },
			func(t *testing.T, l *Limiter) {
				mustAcquire(t, l, Request{})
				ch := acquireAsync(context.Background(), l, Request{Timeout: 2 * time.Second})
				untilQueued(t, l, 1)
				advance(999 * time.Millisecond)
				if l.Stats().QueueDepth != 1 {
					t.Fatal("the wait ended before half the client's timeout")
				}
				advance(time.Millisecond)
				if a := get(t, ch); a.rj == nil || a.rj.Reason != ReasonQueueTimeout {
					t.Fatalf("got %+v, want queue_timeout at 1 s", a)
				}
			}},
		{"a client that leaves the queue is gone, and refunded", func(c *configs.Admission) {
			c.MaxInFlight = 1
			c.Tenants.Default.MaxInFlight = 2
		}, func(t *testing.T, l *Limiter) {
			mustAcquire(t, l, Request{Tenant: "a"})
			ctx, cancel := context.WithCancel(context.Background())
			ch := acquireAsync(ctx, l, Request{Tenant: "a"})
			untilQueued(t, l, 1)
			cancel()
			if a := get(t, ch); !errors.Is(a.err, ErrClientGone) {
				t.Fatalf("got %+v, want ErrClientGone", a)
			}
			if s := l.Stats(); s.Abandoned != 1 || s.QueueDepth != 0 {
				t.Errorf("abandoned %d, depth %d; want 1, 0", s.Abandoned, s.QueueDepth)
			}
			// The tenant's second place is free again: a third request queues
			// instead of being refused for the key's concurrency.
			ch = acquireAsync(context.Background(), l, Request{Tenant: "a"})
			untilQueued(t, l, 1)
			l.SetRecovering(true)
			advance(10 * time.Second) // five times its wait: the engine, not the queue, is late
			if l.Stats().QueueDepth != 1 {
				t.Fatal("a queued request was refused while the engine is recovered")
			}
			if n := l.Divert(); n != 1 {
				t.Fatalf("diverted %d, want 1", n)
			}
			if a := get(t, ch); !errors.Is(a.err, ErrDiverted) {
				t.Fatalf("got %+v, want ErrDiverted", a)
			}
		}},
		{"recovery holds new requests in the queue, refusing none", func(c *configs.Admission) {
			c.MaxInFlight = 1
		}, func(t *testing.T, l *Limiter) {
			l.SetRecovering(true)
			ch := acquireAsync(context.Background(), l, Request{Stream: true})
			untilQueued(t, l, 1)
			advance(30 * time.Second)
			if s := l.Stats(); s.QueueDepth != 1 || s.InFlight != 0 || s.HeldWaits == 0 {
				t.Fatalf("depth %d, in flight %d, held waits %d; want the stream held", s.QueueDepth, s.InFlight, s.HeldWaits)
			}
			l.SetRecovering(false)
			if a := get(t, ch); a.lis == nil {
				t.Fatalf("got %+v, want a slot once the engine is back", a)
			}
		}},
		{"a client's own timeout still ends a held wait", func(c *configs.Admission) {
			c.MaxInFlight = 1
		}, func(t *testing.T, l *Limiter) {
			l.SetRecovering(true)
			ch := acquireAsync(context.Background(), l, Request{Timeout: 3 * time.Second})
			untilQueued(t, l, 1)
			advance(3 * time.Second)
			if a := get(t, ch); a.rj == nil || a.rj.Reason != ReasonQueueTimeout {
				t.Fatalf("got %+v, want queue_timeout at the client's timeout", a)
			}
		}},
		{"suspected: nothing new goes to the engine, nobody is refused, Divert hands the queue over", func(c *configs.Admission) {
			c.MaxInFlight = 2
		}, func(t *testing.T, l *Limiter) {
			first := mustAcquire(t, l, Request{})
			l.SetSuspected(true, true)
			ch := acquireAsync(context.Background(), l, Request{Stream: true})
			kept := acquireAsync(context.Background(), l, Request{Undivertible: true})
			untilQueued(t, l, 2)
			advance(20 * time.Second)
			if s := l.Stats(); s.QueueDepth != 2 || s.InFlight != 1 || !s.Suspected {
				t.Fatalf("depth %d, in flight %d; want both held beside a free slot", s.QueueDepth, s.InFlight)
			}
			if n := l.Divert(); n != 1 {
				t.Fatalf("diverted %d, want the divertible one", n)
			}
			if a := get(t, ch); !errors.Is(a.err, ErrDiverted) {
				t.Fatalf("got %+v, want ErrDiverted", a)
			}
			l.SetSuspected(false, false) // progress: the free slot goes to the queue
			if a := get(t, kept); a.lis == nil {
				t.Fatalf("got %+v, want a slot once the suspicion cleared", a)
			}
			first.Release(Outcome{Success: true})
			if l.Divert() != 0 {
				t.Fatal("Divert with no suspicion took a request")
			}
		}},
		{"a false suspicion without a peer holds a wait only while it lasts", func(c *configs.Admission) {
			c.MaxInFlight, c.MaxQueueWait = 1, 2*time.Second
		}, func(t *testing.T, l *Limiter) {
			mustAcquire(t, l, Request{})
			l.SetSuspected(true, false) // no peer: nothing stops, nobody is refused meanwhile
			ch := acquireAsync(context.Background(), l, Request{Timeout: time.Hour})
			untilQueued(t, l, 1)
			advance(3 * time.Second)
			if s := l.Stats(); s.QueueDepth != 1 || s.HeldWaits == 0 {
				t.Fatalf("depth %d, held waits %d; want the wait held past its bound while suspected", s.QueueDepth, s.HeldWaits)
			}
			// Progress: the engine was healthy, its pace judges the wait
			// again, a whole bound from then (the stall's seconds were not
			// its queue's). Before, the wait stayed held for its client's
			// hour.
			l.SetSuspected(false, false)
			advance(1900 * time.Millisecond)
			if l.Stats().QueueDepth != 1 {
				t.Fatal("refused within a bound of the suspicion's end")
			}
			if a := get(t, ch); a.rj == nil || a.rj.Reason != ReasonQueueTimeout {
				t.Fatalf("got %+v, want queue_timeout within two bounds of the suspicion's end", a)
			}
		}},
		{"a retry that resumed its call's held place gets its own bound back after a false suspicion", func(c *configs.Admission) {
			c.MaxInFlight, c.MaxQueueWait = 1, 2*time.Second
		}, func(t *testing.T, l *Limiter) {
			// The SDK shape's keyed streams (TestTheSDKShapeAtModerateOverload):
			// a retry takes over its call's held place, which keeps the
			// first attempt's age for its order. A false suspicion gave
			// the waits it held their bound back from the place's age, not
			// the attempt's: 28.6 s for a 2 s bound, and the SDK's 6 s ran
			// out in vigil's queue.
			mustAcquire(t, l, Request{})
			r := Request{Keyed: true}
			r.Key[0] = 1
			first := acquireAsync(context.Background(), l, r)
			untilQueued(t, l, 1)
			advance(2100 * time.Millisecond)
			if a := get(t, first); a.rj == nil || a.rj.Reason != ReasonQueueTimeout {
				t.Fatalf("first attempt: got %+v, want queue_timeout at its bound (its place held)", a)
			}
			advance(3 * time.Second) // the client's backoff
			r.Retry = true
			retry := acquireAsync(context.Background(), l, r)
			untilQueued(t, l, 1)
			l.SetSuspected(true, false)
			advance(3 * time.Second) // past its bound, held
			l.SetSuspected(false, false)
			// Its bound (2 s) runs again from the suspicion's end; the
			// wait's timer, in steps of that bound from when it queued,
			// refuses it within two bounds.
			advance(4100 * time.Millisecond)
			select {
			case a := <-retry:
				if a.rj == nil || a.rj.Reason != ReasonQueueTimeout {
					t.Fatalf("retry: got %+v, want queue_timeout", a)
				}
			default:
				t.Error("the retry still waits two of its bounds past the suspicion's end")
				advance(time.Minute)
				get(t, retry)
			}
		}},
		{"a suspicion the verdict confirms keeps its waits held", func(c *configs.Admission) {
			c.MaxInFlight, c.MaxQueueWait = 1, 2*time.Second
		}, func(t *testing.T, l *Limiter) {
			mustAcquire(t, l, Request{})
			l.SetSuspected(true, false)
			ch := acquireAsync(context.Background(), l, Request{Timeout: time.Hour})
			untilQueued(t, l, 1)
			advance(3 * time.Second)
			l.SetRecovering(true) // the verdict, then the suspicion ends in it
			l.SetSuspected(false, false)
			l.SetRecovering(false)
			advance(10 * time.Second)
			select {
			case a := <-ch:
				t.Fatalf("got %+v, want the wait the hang held still held after the recovery", a)
			default:
			}
			advance(time.Hour)
		}},
		{"the calls queued at the verdict are served first when the engine is back, oldest first", func(c *configs.Admission) {
			c.MaxInFlight, c.MaxQueueWait = 1, 2*time.Second
		}, func(t *testing.T, l *Limiter) {
			slot := mustAcquire(t, l, Request{})
			before := acquireAsync(context.Background(), l, Request{Stream: true, Timeout: 30 * time.Second}) // queued at the hang
			untilQueued(t, l, 1)
			l.SetRecovering(true)
			advance(3 * time.Second) // its bound passes while the engine is recovered: held
			during := acquireAsync(context.Background(), l, Request{Stream: true, Timeout: 30 * time.Second})
			untilQueued(t, l, 2)
			advance(10 * time.Second)
			l.SetRecovering(false)
			after := acquireAsync(context.Background(), l, Request{Stream: true, Timeout: 30 * time.Second}) // new, not held
			untilQueued(t, l, 3)
			// newest_first would serve the newest; the calls the hang
			// held since before the verdict go first, then newest_first
			// as ever.
			chans := []<-chan acquired{before, after, during}
			for i := range chans {
				slot.Release(Outcome{Success: true})
				synctest.Wait()
				for j, ch := range chans {
					select {
					case a := <-ch:
						if j != i || a.lis == nil {
							t.Fatalf("waiter %d got %+v first, want waiter %d the slot", j, a, i)
						}
						slot = a.lis
					default:
					}
				}
			}
		}},
		{"a call diverted at the verdict that no peer took keeps its standing", func(c *configs.Admission) {
			c.MaxInFlight, c.MaxQueueWait = 1, 2*time.Second
		}, func(t *testing.T, l *Limiter) {
			slot := mustAcquire(t, l, Request{})
			l.SetRecovering(true)
			back := acquireAsync(context.Background(), l, Request{Stream: true, Timeout: 30 * time.Second, Diverted: true, Undivertible: true})
			untilQueued(t, l, 1)
			advance(time.Second)
			newer := acquireAsync(context.Background(), l, Request{Stream: true, Timeout: 30 * time.Second})
			untilQueued(t, l, 2)
			advance(5 * time.Second)
			l.SetRecovering(false)
			slot.Release(Outcome{Success: true})
			if a := get(t, back); a.lis == nil {
				t.Fatalf("got %+v, want the call diverted at the verdict served first", a)
			} else {
				a.lis.Release(Outcome{Success: true})
			}
			if a := get(t, newer); a.lis == nil {
				t.Fatalf("got %+v, want the newer call served next", a)
			}
		}},
		{"a call a peer kept past the restart keeps its standing when it comes home", func(c *configs.Admission) {
			c.MaxInFlight, c.MaxQueueWait = 1, 2*time.Second
		}, func(t *testing.T, l *Limiter) {
			slot := mustAcquire(t, l, Request{})
			arrived := time.Now() // sent to a peer at its cap during the hang
			advance(time.Second)
			l.SetRecovering(true)
			advance(45 * time.Second) // the restart; the peer keeps the call meanwhile
			l.SetRecovering(false)
			l.SlowStart()
			older := acquireAsync(context.Background(), l, Request{Stream: true, Timeout: 30 * time.Second})
			untilQueued(t, l, 1)
			// The peer sends it home: it has waited since before the
			// verdict, as the calls queued here then.
			back := acquireAsync(context.Background(), l, Request{Stream: true, Timeout: 30 * time.Second, Arrived: arrived})
			untilQueued(t, l, 2)
			newer := acquireAsync(context.Background(), l, Request{Stream: true, Timeout: 30 * time.Second})
			untilQueued(t, l, 3)
			slot.Release(Outcome{Success: true})
			if a := get(t, back); a.lis == nil {
				t.Fatalf("got %+v, want the call in this node's hands at the verdict served first", a)
			} else {
				a.lis.Release(Outcome{Success: true})
			}
			for _, ch := range []<-chan acquired{newer, older} {
				if a := get(t, ch); a.lis != nil {
					a.lis.Release(Outcome{Success: true})
				}
			}
		}},
		{"a moved call waits its client's bound, even while this engine is held", func(c *configs.Admission) {
			c.MaxInFlight, c.MaxQueueWait = 1, time.Minute
		}, func(t *testing.T, l *Limiter) {
			mustAcquire(t, l, Request{})
			ch := acquireAsync(context.Background(), l, Request{Moved: true, Stream: true, Timeout: 8 * time.Second})
			untilQueued(t, l, 1)
			advance(3 * time.Second) // past a stream's first-token bound and the 2 s moved calls once had
			if l.Stats().QueueDepth != 1 {
				t.Fatal("a moved call was refused before half its client's timeout")
			}
			l.SetSuspected(true, true)
			advance(time.Second)
			if a := get(t, ch); a.rj == nil || a.rj.Reason != ReasonQueueTimeout {
				t.Fatalf("got %+v, want queue_timeout at half its client's timeout, the engine held or not", a)
			}
		}},
		{"a moved call never takes a queue place from this node's own calls", func(c *configs.Admission) {
			c.MaxInFlight, c.MaxQueue, c.MaxQueueWait = 1, 2, time.Minute
		}, func(t *testing.T, l *Limiter) {
			mustAcquire(t, l, Request{})
			moved := acquireAsync(context.Background(), l, Request{Moved: true})
			untilQueued(t, l, 1)
			own := acquireAsync(context.Background(), l, Request{})
			untilQueued(t, l, 2)
			if _, rj, _ := l.Acquire(context.Background(), Request{Moved: true}); rj == nil || rj.Reason != ReasonQueueFull {
				t.Fatalf("got %+v, want a moved call refused by a full queue", rj)
			}
			second := acquireAsync(context.Background(), l, Request{})
			if a := get(t, moved); a.rj == nil || a.rj.Reason != ReasonQueueFull {
				t.Fatalf("got %+v, want the moved waiter turned away for this node's own call", a)
			}
			untilQueued(t, l, 2)
			select {
			case a := <-own:
				t.Fatalf("this node's own waiter ended: %+v", a)
			case a := <-second:
				t.Fatalf("this node's own newcomer ended: %+v", a)
			default:
			}
			advance(time.Minute) // their bound ends the test's waits
		}},
		{"a moved call goes after this node's own first attempts", func(c *configs.Admission) {
			c.MaxInFlight, c.MaxQueueWait = 1, time.Minute
		}, func(t *testing.T, l *Limiter) {
			slot := mustAcquire(t, l, Request{})
			m := acquireAsync(context.Background(), l, Request{Moved: true})
			untilQueued(t, l, 1)
			o := acquireAsync(context.Background(), l, Request{Timeout: time.Hour})
			untilQueued(t, l, 2)
			slot.Release(Outcome{Success: true})
			synctest.Wait()
			select {
			case a := <-o:
				a.lis.Release(Outcome{Success: true})
			default:
				t.Fatal("the moved call went before this node's own")
			}
			if a := get(t, m); a.lis == nil {
				t.Fatalf("got %+v, want the moved call served next", a)
			} else {
				a.lis.Release(Outcome{Success: true})
			}
		}},
		{"a moved call is refused at once past its home's wait, and goes home after twice its estimated wait", func(c *configs.Admission) {
			c.MaxInFlight, c.MaxQueueWait = 1, time.Minute
		}, func(t *testing.T, l *Limiter) {
			mustAcquire(t, l, Request{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			acquireAsync(ctx, l, Request{Moved: true, MaxWait: time.Hour})
			untilQueued(t, l, 1)
			// Nothing has completed yet: a wait is estimated at 5 s a call.
			if _, rj, _ := l.Acquire(context.Background(), Request{Moved: true, MaxWait: 3 * time.Second}); rj == nil || rj.Reason != ReasonQueueTimeout {
				t.Fatalf("got %+v, want a moved call refused at once behind another", rj)
			}
			ch := acquireAsync(context.Background(), l, Request{Moved: true, MaxWait: 30 * time.Second})
			untilQueued(t, l, 2)
			advance(9 * time.Second)
			if l.Stats().QueueDepth != 2 {
				t.Fatal("the moved call left before twice its estimated 5 s")
			}
			advance(time.Second)
			if a := get(t, ch); a.rj == nil || a.rj.Reason != ReasonQueueTimeout {
				t.Fatalf("got %+v, want queue_timeout at twice its estimated wait", a)
			}
			cancel()
			synctest.Wait()
		}},
		{"a moved call waits past its patience while it moves up, and goes home once it does not", func(c *configs.Admission) {
			c.MaxInFlight, c.MaxQueueWait = 1, time.Minute
		}, func(t *testing.T, l *Limiter) {
			for range 20 { // answers complete: a known pace, 2 a second
				s := mustAcquire(t, l, Request{})
				advance(50 * time.Millisecond)
				s.Release(Outcome{Success: true})
			}
			slot := mustAcquire(t, l, Request{})
			// A burst moved at a verdict: the last waits 1.5 s by the
			// pace, so its patience is 3 s.
			var moved []<-chan acquired
			for i := range 3 {
				moved = append(moved, acquireAsync(context.Background(), l, Request{Moved: true, MaxWait: time.Minute}))
				untilQueued(t, l, i+1)
			}
			advance(time.Second)
			slot.Release(Outcome{Success: true})
			first := get(t, moved[0])
			advance(time.Second)
			first.lis.Release(Outcome{Success: true})
			second := get(t, moved[1])
			advance(2 * time.Second) // past the last one's patience: it moved up, from 2 ahead to none
			if l.Stats().QueueDepth != 1 {
				t.Fatal("a moved call went home from a node serving the calls moved before it")
			}
			// Now nothing moves: it goes home at its next judgement.
			advance(4 * time.Second)
			if a := get(t, moved[2]); a.rj == nil || a.rj.Reason != ReasonQueueTimeout {
				t.Fatalf("got %+v, want queue_timeout once it stopped moving up", a)
			}
			second.lis.Release(Outcome{Success: true})
		}},
		{"a moved call goes home at its patience while the calls moved before it wait on", func(c *configs.Admission) {
			c.MaxInFlight, c.MaxQueueWait = 1, time.Minute
		}, func(t *testing.T, l *Limiter) {
			for range 20 {
				s := mustAcquire(t, l, Request{})
				advance(50 * time.Millisecond)
				s.Release(Outcome{Success: true})
			}
			slot := mustAcquire(t, l, Request{})
			m1 := acquireAsync(context.Background(), l, Request{Moved: true, MaxWait: time.Minute})
			untilQueued(t, l, 1)
			m2 := acquireAsync(context.Background(), l, Request{Moved: true, MaxWait: time.Minute})
			untilQueued(t, l, 2)
			own := acquireAsync(context.Background(), l, Request{Timeout: time.Hour})
			untilQueued(t, l, 3)
			advance(time.Second)
			slot.Release(Outcome{Success: true}) // to this node's own call
			ownSlot := get(t, own)
			m3 := acquireAsync(context.Background(), l, Request{Timeout: time.Hour}) // another of its own, waiting
			untilQueued(t, l, 3)
			// m2's patience (2 s: one ahead at 2 a second) ends: this node
			// served its own calls, which go first, and m1, moved before
			// it, still waits: a node at its cap with its own work. m1,
			// first in line, waits its home's wait.
			advance(time.Second)
			if a := get(t, m2); a.rj == nil || a.rj.Reason != ReasonQueueTimeout {
				t.Fatalf("got %+v, want queue_timeout while this node's own call waited", a)
			}
			ownSlot.lis.Release(Outcome{Success: true})
			if a := get(t, m3); a.lis == nil {
				t.Fatalf("got %+v, want this node's own call served", a)
			} else {
				a.lis.Release(Outcome{Success: true})
			}
			if a := get(t, m1); a.lis == nil {
				t.Fatalf("got %+v, want the first moved call served next", a)
			}
		}},
		{"slow start holds the queue rather than refusing it", func(c *configs.Admission) {
			c.MaxInFlight = 10
			c.SlowStart = time.Minute
		}, func(t *testing.T, l *Limiter) {
			l.SlowStart()
			mustAcquire(t, l, Request{}) // the whole cap at 10%
			ch := acquireAsync(context.Background(), l, Request{Stream: true})
			untilQueued(t, l, 1)
			advance(3 * time.Second) // past its 2 s wait, the cap still 1
			if s := l.Stats(); s.QueueDepth != 1 || s.HeldWaits == 0 {
				t.Fatal("a stream was refused during the slow start")
			}
			advance(2 * time.Second) // the cap has grown to 2
			if a := get(t, ch); a.lis == nil {
				t.Fatalf("got %+v, want a slot as the cap ramps", a)
			}
		}},
		{"a queued request that can wait out the recovery stays queued and is served after it", func(c *configs.Admission) {
			c.MaxInFlight = 1
			c.MaxQueueWait = 5 * time.Minute
		}, func(t *testing.T, l *Limiter) {
			first := mustAcquire(t, l, Request{})
			ch := acquireAsync(context.Background(), l, Request{})
			untilQueued(t, l, 1)
			l.SetRecovering(true)
			first.Release(Outcome{Cancelled: true}) // cut with the engine: the slot frees, nothing is admitted
			if s := l.Stats(); s.QueueDepth != 1 || s.InFlight != 0 {
				t.Fatalf("during the recovery: depth %d, in flight %d; want 1, 0", s.QueueDepth, s.InFlight)
			}
			l.SetRecovering(false)
			if a := get(t, ch); a.lis == nil {
				t.Fatalf("got %+v, want a slot once the engine is back", a)
			}
		}},
		{"bodies held for a lost engine count against max_queue_bytes", func(c *configs.Admission) {
			c.MaxInFlight = 1
			c.MaxQueueBytes = 100
		}, func(t *testing.T, l *Limiter) {
			mustAcquire(t, l, Request{})
			l.HoldBytes(80)
			if _, rj, _ := l.Acquire(context.Background(), Request{Bytes: 30}); rj == nil || rj.Reason != ReasonQueueFull {
				t.Fatalf("got %+v, want queue_full: 80 of 100 bytes are held", rj)
			}
			l.HoldBytes(-80)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			acquireAsync(ctx, l, Request{Bytes: 30})
			untilQueued(t, l, 1)
		}},
		{"a tenant over its rpm is rate-limited; an ignored slot is refunded", func(c *configs.Admission) {
			c.Tenants.Default.RPM = 1
		}, func(t *testing.T, l *Limiter) {
			lis := mustAcquire(t, l, Request{Tenant: "a"})
			_, rj, _ := l.Acquire(context.Background(), Request{Tenant: "a"})
			if rj == nil || rj.Reason != ReasonTenantRPM || !rj.RateLimited() || rj.Wait <= 0 {
				t.Fatalf("got %+v, want tenant_rpm (429) with a wait", rj)
			}
			mustAcquire(t, l, Request{Tenant: "b"}) // another key is not held back
			lis.Ignore()
			lis.Ignore() // a second end does nothing
			mustAcquire(t, l, Request{Tenant: "a"})
			if s := l.Stats(); s.InFlight != 2 {
				t.Errorf("in flight %d, want 2", s.InFlight)
			}
		}},
		{"a request over the key's whole tpm can never fit", func(c *configs.Admission) {
			c.Tenants.Default.TPM = 100
		}, func(t *testing.T, l *Limiter) {
			_, rj, _ := l.Acquire(context.Background(), Request{Tenant: "a", Tokens: 101})
			if rj == nil || rj.Reason != ReasonTenantTPM || !rj.Final {
				t.Fatalf("got %+v, want a final tenant_tpm", rj)
			}
		}},
		{"retries that would run a call again are budgeted; others are not", func(c *configs.Admission) {
			c.RetryRatio = 0
		}, func(t *testing.T, l *Limiter) {
			for range RetryFloor {
				mustAcquire(t, l, Request{Retry: true}).Release(Outcome{Success: true})
			}
			_, rj, _ := l.Acquire(context.Background(), Request{Retry: true})
			if rj == nil || rj.Reason != ReasonRetryBudget || !rj.RateLimited() {
				t.Fatalf("got %+v, want retry_budget (429)", rj)
			}
			mustAcquire(t, l, Request{Retry: true, NeverExecuted: true})
		}},
		{"a dropped answer cuts the automatic cap", func(c *configs.Admission) { c.MaxInFlight = 0 },
			func(t *testing.T, l *Limiter) {
				var ls []*Listener
				for range windowMinSamples {
					ls = append(ls, mustAcquire(t, l, Request{}))
				}
				advance(windowMax)
				for _, lis := range ls {
					lis.Release(Outcome{Dropped: true})
				}
				if s := l.Stats(); s.Cap >= autoInitial || !s.Automatic {
					t.Errorf("cap %d after drops, want below %d", s.Cap, autoInitial)
				}
			}},
		{"a fixed cap admits three quarters of itself while saturated", func(c *configs.Admission) { c.MaxInFlight = 8 },
			func(t *testing.T, l *Limiter) {
				l.SetSaturated(true)
				if c := l.Stats().Cap; c != 6 {
					t.Errorf("cap %d, want 6", c)
				}
				l.SetMaxInFlight(12)
				if c := l.Stats().Cap; c != 9 {
					t.Errorf("cap %d after an override of 12 while saturated, want 9", c)
				}
				l.SetSaturated(false)
				if c := l.Stats().Cap; c != 12 {
					t.Errorf("cap %d, want 12", c)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := testConfig()
				if tc.cfg != nil {
					tc.cfg(&cfg)
				}
				tc.run(t, New(cfg))
			})
		})
	}
}

// A Limit is pluggable: the core asks it for the cap and tells it what
// happened.
type countingLimit struct {
	fixedCap
	samples, firsts int
}

func (c *countingLimit) OnSample(Sample, time.Time) bool { c.samples++; return false }
func (c *countingLimit) OnFirstToken(time.Time, time.Duration, time.Time) bool {
	c.firsts++
	return false
}

func TestAnotherLimitCanBePluggedIn(t *testing.T) {
	cfg := testConfig()
	cfg.MaxInFlight = 0
	lim := &countingLimit{fixedCap: fixedCap{n: 1}}
	l := New(cfg, WithLimit(lim))
	lis := mustAcquire(t, l, Request{})
	if s := l.Stats(); s.Cap != 1 || !s.Automatic {
		t.Fatalf("cap %d (automatic %v), want the plugged limit's 1", s.Cap, s.Automatic)
	}
	lis.FirstToken(time.Second)
	lis.Release(Outcome{Success: true, Streamed: true})
	mustAcquire(t, l, Request{}).Release(Outcome{Cancelled: true}) // no sample: neither success nor drop
	if lim.samples != 1 || lim.firsts != 1 {
		t.Errorf("samples %d, first tokens %d; want 1 and 1", lim.samples, lim.firsts)
	}
}
