package admission

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// gate is an engine that answers once opened: plain JSON, or a stream of
// two events whose headers come only then (as a prefill would hold them).
type gate struct {
	once    sync.Once
	release chan struct{}
}

func newGate(t *testing.T) (*gate, *fakeEngine) {
	g := &gate{release: make(chan struct{})}
	eng := newFakeEngine(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		select {
		case <-g.release:
		case <-r.Context().Done():
			return
		}
		if !strings.Contains(string(body), `"stream":true`) {
			okJSON(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 1; i <= 2; i++ {
			fmt.Fprintf(w, "data: {\"n\":%d}\n\n", i)
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})
	t.Cleanup(g.open) // before the engine closes: its handlers must return
	return g, eng
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// timesOut sends one attempt whose client gives up before its answer
// begins, as an SDK's timeout does.
func timesOut(t *testing.T, c *http.Client, p proxy, body string, hdr ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	if a := call(ctx, c, p.url, body, hdr...); a.err == nil {
		t.Fatalf("the attempt that should time out got %d %q", a.status, a.body)
	}
	eventually(t, 2*time.Second, "the client's departure seen", func() bool {
		s := p.l.Stats()
		return s.Orphans == 1 || s.CancelledImmediate == 1
	})
}

const streamedBody = `{"model":"m","prompt":"hello there","max_tokens":8,"stream":true}`

// TestAKeylessRetryAdoptsItsOrphan: without an idempotency key, an
// attempt whose client timed out before its answer began leaves its
// execution running (or its answer stored) for the next request with the
// same tenant, method, path and body; nothing else shares it.
func TestAKeylessRetryAdoptsItsOrphan(t *testing.T) {
	for _, tc := range []struct {
		name        string
		body        string
		finishFirst bool // the orphan finishes before the retry: stored
	}{
		{"a unary retry adopts the running execution", completionBody, false},
		{"a unary retry adopts the answer finished after its client left", completionBody, true},
		{"a streamed retry adopts the running execution", streamedBody, false},
		{"a streamed retry adopts the stream finished after its client left", streamedBody, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, eng := newGate(t)
			p := startProxy(t, testConfig(), eng.srv.URL)
			c := newClient(t)
			timesOut(t, c, p, tc.body, "X-Stainless-Retry-Count", "0")
			if tc.finishFirst {
				g.open()
				eventually(t, 2*time.Second, "the orphan finished", func() bool { return eng.cur.Load() == 0 })
			}
			retry := make(chan answer, 1)
			go func() { retry <- call(context.Background(), c, p.url, tc.body, "X-Stainless-Retry-Count", "1") }()
			if !tc.finishFirst {
				eventually(t, 2*time.Second, "adopted", func() bool { return p.l.Stats().Adopted == 1 })
				g.open()
			}
			a := <-retry
			if a.status != http.StatusOK || a.body == "" {
				t.Fatalf("retry: %d %q %v", a.status, a.body, a.err)
			}
			if strings.Contains(tc.body, "stream") && !strings.HasPrefix(a.body, `data: {"n":1}`) {
				t.Errorf("the adopted stream does not start at its first event: %q", a.body)
			}
			s := p.l.Stats()
			if n := eng.calls.Load(); n != 1 || s.Executions != 1 {
				t.Errorf("engine calls %d, executions %d; want 1 and 1", n, s.Executions)
			}
			adopted, stored := uint64(1), uint64(0)
			if tc.finishFirst {
				adopted, stored = 0, 1
			}
			if s.Adopted != adopted || s.AdoptedStored != stored || s.CoalescedAttached != 0 || s.CoalescedStored != 0 {
				t.Errorf("adopted %d stored %d, attached %d stored %d; want %d %d, 0 0 (an adoption is no keyed attach)",
					s.Adopted, s.AdoptedStored, s.CoalescedAttached, s.CoalescedStored, adopted, stored)
			}
		})
	}
}

// TestOnlyTheSameRequestsOrphanIsAdopted: an orphan is handed only to a
// request identical to the one that left: never to a live identical
// request, another tenant's or another body's.
func TestOnlyTheSameRequestsOrphanIsAdopted(t *testing.T) {
	oneByteMore := strings.Replace(completionBody, "hello there", "hello there!", 1)
	for _, tc := range []struct {
		name      string
		first     []string // headers of the attempt that times out (nil: none does)
		next      string   // the second request's body
		nextHdr   []string
		wantCalls int64
	}{
		{"two identical concurrent keyless requests run twice", nil, completionBody, nil, 2},
		{"another tenant's identical request never adopts", []string{"Authorization", "Bearer tenant-a"},
			completionBody, []string{"Authorization", "Bearer tenant-b", "X-Stainless-Retry-Count", "1"}, 2},
		{"a body one byte different never adopts", nil, oneByteMore, []string{"X-Stainless-Retry-Count", "1"}, 2},
		{"the same request adopts (the control)", nil, completionBody, []string{"X-Stainless-Retry-Count", "1"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, eng := newGate(t)
			p := startProxy(t, testConfig(), eng.srv.URL)
			c := newClient(t)
			var live chan answer
			if tc.name == "two identical concurrent keyless requests run twice" {
				live = make(chan answer, 1)
				go func() { live <- call(context.Background(), c, p.url, completionBody) }()
				eventually(t, 2*time.Second, "the first upstream", func() bool { return eng.calls.Load() == 1 })
			} else {
				timesOut(t, c, p, completionBody, append(tc.first, "X-Stainless-Retry-Count", "0")...)
			}
			next := make(chan answer, 1)
			go func() { next <- call(context.Background(), c, p.url, tc.next, tc.nextHdr...) }()
			eventually(t, 2*time.Second, "the second request placed", func() bool {
				return eng.calls.Load() == 2 || p.l.Stats().Adopted == 1
			})
			g.open()
			if a := <-next; a.status != http.StatusOK {
				t.Fatalf("second request: %d %v", a.status, a.err)
			}
			if live != nil {
				if a := <-live; a.status != http.StatusOK {
					t.Fatalf("first request: %d %v", a.status, a.err)
				}
			}
			if n := eng.calls.Load(); n != tc.wantCalls {
				t.Errorf("engine calls %d, want %d", n, tc.wantCalls)
			}
			if want := uint64(2 - tc.wantCalls); p.l.Stats().Adopted != want {
				t.Errorf("adopted %d, want %d", p.l.Stats().Adopted, want)
			}
		})
	}
}

// TestTheRetryBudgetChargesOnlyKeylessRetriesThatCreateWork: with the
// budget spent, a keyless retry is refused only when it would start a
// second execution of a call that had one.
func TestTheRetryBudgetChargesOnlyKeylessRetriesThatCreateWork(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before puts the call's first attempt in its state: turned away,
		// orphaned, or executed and cancelled.
		before func(t *testing.T, c *http.Client, p proxy, g *gate)
		want   int
	}{
		{"a retry whose earlier attempt was only turned away is a first attempt", func(t *testing.T, c *http.Client, p proxy, g *gate) {
			hold := make(chan answer, 1)
			go func() { hold <- call(context.Background(), c, p.url, `{"prompt":"holds the slot"}`) }()
			eventually(t, 2*time.Second, "slot taken", func() bool { return p.l.Stats().InFlight == 1 })
			a := call(context.Background(), c, p.url, completionBody, "X-Stainless-Retry-Count", "0")
			checkRejection(t, a, http.StatusServiceUnavailable, ReasonQueueFull, true)
			g.open()
			<-hold
		}, http.StatusOK},
		{"a retry that adopts costs nothing", func(t *testing.T, c *http.Client, p proxy, g *gate) {
			timesOut(t, c, p, completionBody, "X-Stainless-Retry-Count", "0")
			g.open()
			eventually(t, 2*time.Second, "the orphan's answer stored", func() bool { return p.l.Stats().InFlight == 0 })
		}, http.StatusOK},
		{"a retry that creates work is held to the budget", func(t *testing.T, c *http.Client, p proxy, g *gate) {
			timesOut(t, c, p, completionBody) // no SDK marker: cancelled at once
			g.open()
			eventually(t, 2*time.Second, "its slot freed", func() bool { return p.l.Stats().InFlight == 0 })
		}, http.StatusTooManyRequests},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, eng := newGate(t)
			cfg := testConfig()
			cfg.MaxInFlight, cfg.MaxQueue = 1, 0
			cfg.RetryRatio, cfg.RetryWindow = 0, time.Minute // the floor alone
			p := startProxy(t, cfg, eng.srv.URL)
			c := newClient(t)
			tc.before(t, c, p, g)
			for i := range retryFloor { // spend the budget on retries of calls run elsewhere
				body := fmt.Sprintf(`{"prompt":"spent %d"}`, i)
				if a := call(context.Background(), c, p.url, body, "X-Stainless-Retry-Count", "1"); a.status != 200 {
					t.Fatalf("retry %d within the floor: %d", i, a.status)
				}
			}
			a := call(context.Background(), c, p.url, completionBody, "X-Stainless-Retry-Count", "1")
			if a.status != tc.want {
				t.Errorf("the retry got %d %s, want %d", a.status, a.body, tc.want)
			}
			if tc.want == http.StatusTooManyRequests {
				checkRejection(t, a, http.StatusTooManyRequests, ReasonRetryBudget, true)
			}
		})
	}
}

// TestAnSDKsRetryFindsItsExecutionAfterAShortCancelAfter: the OpenAI SDKs
// retry a timeout after their backoff (0.5 s doubling, up to 8 s); an
// execution whose client announced it will retry (X-Stainless-Retry-Count)
// is kept until that retry is due even when cancel_after is shorter.
func TestAnSDKsRetryFindsItsExecutionAfterAShortCancelAfter(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hdr     []string
		advance time.Duration // after the client left, before its retry
		kept    bool
	}{
		{"a first attempt's execution outlives cancel_after until its retry is due",
			[]string{"Idempotency-Key", "k", "X-Stainless-Retry-Count", "0"}, 1200 * time.Millisecond, true},
		{"a third attempt's, for its longer backoff", []string{"Idempotency-Key", "k", "X-Stainless-Retry-Count", "2"},
			2500 * time.Millisecond, true},
		{"past the backoff it is cancelled", []string{"Idempotency-Key", "k", "X-Stainless-Retry-Count", "0"},
			1600 * time.Millisecond, false},
		{"without the SDK's marker cancel_after alone holds", []string{"Idempotency-Key", "k"},
			400 * time.Millisecond, false},
		{"a keyless one, adopted by its retry", []string{"X-Stainless-Retry-Count", "0"}, 1200 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				_, eng := newGate(t)
				cfg := testConfig()
				cfg.CancelAfter = 300 * time.Millisecond
				p := startProxy(t, cfg, eng.srv.URL)
				c := newClient(t)
				ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
				defer cancel()
				call(ctx, c, p.url, completionBody, tc.hdr...)
				eventually(t, 2*time.Second, "the client's departure seen", func() bool {
					s := p.l.Stats()
					return s.Orphans == 1
				})
				advance(tc.advance)
				eventually(t, time.Second, "cancelled or kept", func() bool {
					return tc.kept || p.l.Stats().CancelledDeferred == 1
				})
				if s := p.l.Stats(); (s.CancelledDeferred == 0) != tc.kept {
					t.Errorf("cancelled after %v: %d, want kept %v", tc.advance, s.CancelledDeferred, tc.kept)
				}
			})
		})
	}
}

// TestAKeylessSDKRetryResumesItsQueuePlace: an SDK that retries timeouts
// (it sends X-Stainless-Retry-Count) gets the queue place of its attempt
// kept, as a keyed call does, and its retry resumes it ahead of a call
// that came later; a client without the marker loses its place.
func TestAKeylessSDKRetryResumesItsQueuePlace(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first []string // the headers of the attempt that leaves the queue
		want  []string
	}{
		{"an SDK's retry goes before the later call", []string{"X-Stainless-Retry-Count", "0"},
			[]string{"blocker", "retry", "later"}},
		{"without the marker the later call goes first", nil, []string{"blocker", "later", "retry"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			var once sync.Once
			open := func() { once.Do(func() { close(release) }) }
			eng, order := attemptOrderEngine(t, blockUntil(release))
			t.Cleanup(open)
			cfg := testConfig()
			cfg.MaxInFlight, cfg.Order = 1, "fifo"
			p := startProxy(t, cfg, eng.srv.URL)
			c := newClient(t)
			done := make(chan answer, 3)
			go func() { done <- call(context.Background(), c, p.url, `{"prompt":"blocker"}`, "X-Attempt", "blocker") }()
			eventually(t, 2*time.Second, "slot taken", func() bool { return p.l.Stats().InFlight == 1 })
			ctx, cancel := context.WithCancel(context.Background())
			left := make(chan answer, 1)
			go func() { left <- call(ctx, c, p.url, completionBody, append(tc.first, "X-Attempt", "first")...) }()
			eventually(t, 2*time.Second, "queued", func() bool { return p.l.Stats().QueueDepth == 1 })
			cancel()
			<-left
			eventually(t, 2*time.Second, "its place held or dropped", func() bool {
				s := p.l.Stats()
				return s.QueueAbandoned == 1
			})
			go func() { done <- call(context.Background(), c, p.url, `{"prompt":"later"}`, "X-Attempt", "later") }()
			eventually(t, 2*time.Second, "the later call queued", func() bool { return p.l.Stats().Queued == 2 })
			go func() {
				done <- call(context.Background(), c, p.url, completionBody, "X-Stainless-Retry-Count", "1", "X-Attempt", "retry")
			}()
			eventually(t, 2*time.Second, "the retry queued", func() bool { return p.l.Stats().Queued == 3 })
			open()
			for range 3 {
				if a := <-done; a.status != http.StatusOK {
					t.Fatalf("status %d: %s", a.status, a.body)
				}
			}
			if got := order(); !slices.Equal(got, tc.want) {
				t.Errorf("the engine got %v, want %v", got, tc.want)
			}
		})
	}
}
