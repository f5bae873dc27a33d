package admission

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

const streamBody = `{"model":"m","prompt":"tell me","max_tokens":8,"stream":true}`

// overloaded is a proxy with a fixed cap of 1, held by a call the engine
// never answers, and three plain first attempts queued behind it; then
// five seconds pass (the clock of the test's bubble) with nothing admitted: the queue
// drains at 0.2 a second, so a new first attempt (served newest first)
// waits behind a backlog of 3 that needs 20 s.
func overloaded(t *testing.T, streamQueueWait time.Duration) (proxy, *http.Client) {
	t.Helper()
	release := make(chan struct{})
	eng := newFakeEngine(t, blockUntil(release))
	t.Cleanup(func() { close(release) }) // before the engine closes
	cfg := testConfig()
	cfg.MaxInFlight = 1
	cfg.MaxQueueWait = time.Minute
	cfg.StreamQueueWait = streamQueueWait
	p := startProxy(t, cfg, eng.srv.URL)
	c := newClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() { call(ctx, c, p.url, completionBody) })
	eventually(t, 2*time.Second, "the slot taken", func() bool { return p.l.Stats().InFlight == 1 })
	for range 3 {
		wg.Go(func() { call(ctx, c, p.url, completionBody) })
	}
	eventually(t, 2*time.Second, "three calls queued", func() bool { return p.l.Stats().QueueDepth == 3 })
	advance(5 * time.Second)
	return p, c
}

// TestAStreamTheQueueCannotReachInTimeIsTurnedAwayAtOnce: a streamed
// request's first token is worth little after its bound (here
// stream_queue_wait, 500 ms); when the queue drains too slowly to reach it
// within that, it gets 503 with an honest Retry-After at once instead of
// waiting to be told the same later. A plain call under the same load
// still queues.
func TestAStreamTheQueueCannotReachInTimeIsTurnedAwayAtOnce(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		p, c := overloaded(t, 500*time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		a := call(ctx, c, p.url, streamBody)
		checkRejection(t, a, http.StatusServiceUnavailable, ReasonStreamDeadline, true)
		if s := p.l.Stats(); s.QueueDepth != 3 || s.Rejected[ReasonStreamDeadline] != 1 {
			t.Errorf("queue depth %d, stream rejections %d; want 3 (the stream never queued) and 1",
				s.QueueDepth, s.Rejected[ReasonStreamDeadline])
		}

		unary, stop := context.WithCancel(context.Background())
		done := make(chan answer, 1)
		go func() { done <- call(unary, c, p.url, completionBody) }()
		eventually(t, 2*time.Second, "the plain call queued", func() bool { return p.l.Stats().QueueDepth == 4 })
		stop()
		<-done
	})
}

// TestAnAnnouncedTimeoutOverridesTheStreamBound: with X-Stainless-Timeout
// the stream's bound is half its client's timeout, as for any call, not
// stream_queue_wait: 60 s leaves 30 s, enough for the 20 s the backlog
// needs (it queues); 2 s leaves 1 s (turned away at once).
func TestAnAnnouncedTimeoutOverridesTheStreamBound(t *testing.T) {
	for _, tc := range []struct {
		timeout string
		queued  bool
	}{
		{"60", true},
		{"2", false},
	} {
		t.Run("X-Stainless-Timeout "+tc.timeout, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				p, c := overloaded(t, 500*time.Millisecond)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan answer, 1)
				go func() { done <- call(ctx, c, p.url, streamBody, "X-Stainless-Timeout", tc.timeout) }()
				if !tc.queued {
					select {
					case a := <-done:
						checkRejection(t, a, http.StatusServiceUnavailable, ReasonStreamDeadline, true)
					case <-time.After(2 * time.Second):
						t.Fatal("the stream was not answered at once")
					}
					return
				}
				eventually(t, 2*time.Second, "the stream queued", func() bool { return p.l.Stats().QueueDepth == 4 })
				if s := p.l.Stats(); s.Rejected[ReasonStreamDeadline] != 0 {
					t.Errorf("%d stream rejections, want 0", s.Rejected[ReasonStreamDeadline])
				}
				cancel()
				<-done
			})
		})
	}
}

// TestAQueuedStreamWaitsNoLongerThanItsFirstTokenIsWorth: where the queue
// drains in time (4 a second: the next slot in 250 ms) the stream queues, and its wait ends at
// stream_queue_wait, not at max_queue_wait (a minute here).
func TestAQueuedStreamWaitsNoLongerThanItsFirstTokenIsWorth(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		eng := newFakeEngine(t, blockUntil(release))
		cfg := testConfig()
		cfg.MaxInFlight = 4
		cfg.MaxQueueWait = time.Minute
		cfg.StreamQueueWait = 500 * time.Millisecond
		p := startProxy(t, cfg, eng.srv.URL)
		c := newClient(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for range 4 { // admitted within the second: a drain of 4 a second
			go call(ctx, c, p.url, completionBody)
		}
		eventually(t, 2*time.Second, "the slots taken", func() bool { return p.l.Stats().InFlight == 4 })
		done := make(chan answer, 1)
		go func() { done <- call(context.Background(), c, p.url, streamBody) }()
		eventually(t, 2*time.Second, "the stream queued", func() bool { return p.l.Stats().QueueDepth == 1 })
		advance(499 * time.Millisecond)
		if p.l.Stats().QueueDepth != 1 {
			t.Fatal("the stream left the queue before its bound")
		}
		advance(time.Millisecond)
		select {
		case a := <-done:
			checkRejection(t, a, http.StatusServiceUnavailable, ReasonQueueTimeout, true)
		case <-time.After(2 * time.Second):
			t.Fatal("the stream still waits past stream_queue_wait")
		}
	})
}

// TestAClientTimeoutLearnedFromKeyedRetriesAppliesToUnannouncedCalls:
// clients that announce no timeout (the OpenAI Node SDK with a client-level
// timeout) give up on queued keyed calls after 300 ms and retry them with
// the same Idempotency-Key: that wait was their timeout. A later call of
// the same route without a key or the header is then treated as if it had
// announced it: its queue wait is cut to half of it, not max_queue_wait.
func TestAClientTimeoutLearnedFromKeyedRetriesAppliesToUnannouncedCalls(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	eng := newFakeEngine(t, blockUntil(release))
	cfg := testConfig()
	cfg.MaxInFlight = 1
	cfg.MaxQueueWait = 4 * time.Second
	p := startProxy(t, cfg, eng.srv.URL)
	c := newClient(t)
	go call(context.Background(), c, p.url, completionBody)
	eventually(t, 2*time.Second, "the slot taken", func() bool { return p.l.Stats().InFlight == 1 })

	const clientTimeout = 300 * time.Millisecond
	// The first attempts time out in the queue.
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
			defer cancel()
			if a := call(ctx, c, p.url, completionBody, "Idempotency-Key", "call-"+strconv.Itoa(i)); a.err == nil {
				t.Errorf("call %d answered %d, want its client to time out in the queue", i, a.status)
			}
		})
	}
	wg.Wait()
	eventually(t, 2*time.Second, "the give-ups noted", func() bool {
		return p.l.co.GaveUp() == 3
	})
	// Their retries tell it was a timeout. (Once learned, a retry is told
	// to come back just before its client would give up: 503 or a timeout.)
	for i := range 3 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
			defer cancel()
			a := call(ctx, c, p.url, completionBody, "Idempotency-Key", "call-"+strconv.Itoa(i), "X-Stainless-Retry-Count", "1")
			if a.err == nil && a.status != http.StatusServiceUnavailable {
				t.Errorf("the retry of call %d answered %d, want a timeout or 503", i, a.status)
			}
		})
	}
	wg.Wait()

	if got := p.l.Stats().LearnedClientTimeouts["/v1/completions"]; got < clientTimeout/2 || got > 2*clientTimeout {
		t.Errorf("learned %v for /v1/completions, want about %v", got, clientTimeout)
	}
	begin := time.Now()
	a := call(context.Background(), c, p.url, completionBody)
	took := time.Since(begin)
	checkRejection(t, a, http.StatusServiceUnavailable, ReasonQueueTimeout, true)
	if took > time.Second {
		t.Errorf("an unannounced call waited %v in the queue, want about half the learned 300 ms timeout", took)
	}
}

// TestARetrysShortWaitTeachesNoTimeout: a client whose one timeout covers
// its retries (the Vercel AI SDK's abort) sends no key and no retry
// header; its retry, told to come back, arrives late in that timeout and
// gives up soon after. Only a first attempt's wait is its client's whole
// timeout. Counted as give-ups, the retries' short waits made the route's
// learned timeout 0.4 s where its clients wait 6 s (issue 41: after vigil's
// restart the cap was cut from 68 to 12 as "late" and 2,527 calls told to
// come back). Here each client leaves while the engine holds its answer.
func TestARetrysShortWaitTeachesNoTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	eng := newFakeEngine(t, blockUntil(release))
	cfg := testConfig()
	cfg.MaxInFlight = 8
	p := startProxy(t, cfg, eng.srv.URL)
	c := newClient(t)
	body := func(i int) string {
		return `{"model":"m","prompt":"call ` + strconv.Itoa(i) + `","max_tokens":8}`
	}
	giveUp := func(wait time.Duration) {
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				defer cancel()
				if a := call(ctx, c, p.url, body(i)); a.err == nil {
					t.Errorf("call %d (wait %v) answered %d %s, want its client to give up", i, wait, a.status, a.body)
				}
			})
		}
		wg.Wait()
	}
	// The first attempts wait out their clients' 300 ms, then each call is
	// tried twice more, 50 ms before its client's abort.
	const clientTimeout = 300 * time.Millisecond
	giveUp(clientTimeout)
	eventually(t, 2*time.Second, "the first attempts' give-ups learned", func() bool {
		return p.l.Stats().LearnedClientTimeouts["/v1/completions"] > 0
	})
	giveUp(50 * time.Millisecond)
	giveUp(50 * time.Millisecond)
	eventually(t, 2*time.Second, "the retries' ends seen", func() bool { return p.l.Stats().InFlight == 0 })
	if got := p.l.Stats().LearnedClientTimeouts["/v1/completions"]; got < clientTimeout*2/3 || got > 2*clientTimeout {
		t.Errorf("learned %v for /v1/completions, want about the first attempts' %v", got, clientTimeout)
	}
	if s := p.l.Stats(); s.Retries < 6 {
		t.Errorf("%d retries seen, want the 6 tries after the first attempts read as retries", s.Retries)
	}
}
