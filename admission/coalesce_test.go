package admission

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// sseSteps streams n events, the first at once and each next one when
// steps yields, then [DONE]; it stops when the client (the proxy) leaves.
func sseSteps(steps <-chan struct{}, n int) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for i := 1; i <= n; i++ {
			if i > 1 {
				select {
				case <-steps:
				case <-r.Context().Done():
					return
				}
			}
			fmt.Fprintf(w, "data: {\"n\":%d}\n\n", i)
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
}

// openStream starts a streamed call and returns its reader.
func openStream(t *testing.T, ctx context.Context, c *http.Client, base string, hdr ...string) (*bufio.Reader, func()) {
	t.Helper()
	resp, err := post(ctx, c, base, `{"prompt":"tell me","stream":true}`, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return bufio.NewReader(resp.Body), func() { resp.Body.Close() }
}

func readEvent(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		line, _ := br.ReadString('\n')
		_, _ = br.ReadString('\n') // the blank line after the event
		got <- line
	}()
	select {
	case l := <-got:
		return strings.TrimSpace(l)
	case <-time.After(3 * time.Second):
		t.Fatal("no event within 3 s")
		return ""
	}
}

func TestARetryDuringItsExecutionAttaches(t *testing.T) {
	t.Run("two attempts of one call make one upstream execution and get the same whole answer", func(t *testing.T) {
		release := make(chan struct{})
		eng := newFakeEngine(t, blockUntil(release))
		p := startProxy(t, testConfig(), eng.srv.URL)
		c := newClient(t)
		first := make(chan answer, 1)
		go func() { first <- call(context.Background(), c, p.url, completionBody, "Idempotency-Key", "call-1") }()
		eventually(t, 2*time.Second, "first attempt upstream", func() bool { return eng.calls.Load() == 1 })
		second := make(chan answer, 1)
		go func() {
			second <- call(context.Background(), c, p.url, completionBody, "Idempotency-Key", "call-1", "X-Stainless-Retry-Count", "1")
		}()
		eventually(t, 2*time.Second, "retry attached", func() bool { return p.l.Stats().CoalescedAttached == 1 })
		close(release)
		a, b := <-first, <-second
		if a.status != 200 || b.status != 200 || a.body != b.body || a.body == "" {
			t.Errorf("answers differ: %d %q vs %d %q", a.status, a.body, b.status, b.body)
		}
		if n := eng.calls.Load(); n != 1 {
			t.Errorf("%d upstream executions, want 1", n)
		}
		if s := p.l.Stats(); s.Calls != 2 || s.Executions != 1 || s.Retries != 1 {
			t.Errorf("calls %d executions %d retries %d, want 2, 1, 1", s.Calls, s.Executions, s.Retries)
		}
	})

	t.Run("a streamed retry gets the stream from its start, then live", func(t *testing.T) {
		steps := make(chan struct{})
		eng := newFakeEngine(t, sseSteps(steps, 3))
		p := startProxy(t, testConfig(), eng.srv.URL)
		c := newClient(t)
		a, closeA := openStream(t, context.Background(), c, p.url, "Idempotency-Key", "stream-1")
		defer closeA()
		if e := readEvent(t, a); e != `data: {"n":1}` {
			t.Fatalf("first listener's first event %q", e)
		}
		steps <- struct{}{}
		if e := readEvent(t, a); e != `data: {"n":2}` {
			t.Fatalf("first listener's second event %q", e)
		}
		b, closeB := openStream(t, context.Background(), c, p.url, "Idempotency-Key", "stream-1")
		defer closeB()
		for _, want := range []string{`data: {"n":1}`, `data: {"n":2}`} {
			if e := readEvent(t, b); e != want {
				t.Fatalf("late listener replay: %q, want %q", e, want)
			}
		}
		steps <- struct{}{}
		for name, br := range map[string]*bufio.Reader{"first": a, "late": b} {
			if e := readEvent(t, br); e != `data: {"n":3}` {
				t.Errorf("%s listener live event %q", name, e)
			}
			if e := readEvent(t, br); e != `data: [DONE]` {
				t.Errorf("%s listener end %q", name, e)
			}
		}
		if n := eng.calls.Load(); n != 1 {
			t.Errorf("%d upstream executions, want 1", n)
		}
	})
}

func TestDeferredCancellation(t *testing.T) {
	t.Run("a keyed call whose client left runs on for cancel_after, then is cancelled", func(t *testing.T) {
		steps := make(chan struct{})
		eng := newFakeEngine(t, sseSteps(steps, 1000))
		cfg := testConfig()
		cfg.CancelAfter = 300 * time.Millisecond
		p := startProxy(t, cfg, eng.srv.URL)
		c := newClient(t)
		ctx, cancel := context.WithCancel(context.Background())
		a, closeA := openStream(t, ctx, c, p.url, "Idempotency-Key", "leaves")
		readEvent(t, a)
		cancel()
		closeA()
		left := time.Now()
		time.Sleep(150 * time.Millisecond)
		if eng.cancelled.Load() != 0 || eng.cur.Load() != 1 {
			t.Fatalf("upstream cancelled %v after the client left, before cancel_after", time.Since(left))
		}
		eventually(t, 2*time.Second, "upstream cancelled after cancel_after", func() bool { return eng.cancelled.Load() == 1 })
		if d := time.Since(left); d < 250*time.Millisecond {
			t.Errorf("upstream cancelled after %v, want >= cancel_after 300ms", d)
		}
		if s := p.l.Stats(); s.CancelledDeferred != 1 || s.CancelledImmediate != 0 {
			t.Errorf("cancelled deferred %d immediate %d, want 1 and 0", s.CancelledDeferred, s.CancelledImmediate)
		}
		eventually(t, time.Second, "slot released", func() bool { return p.l.Stats().InFlight == 0 })

		// The retry comes after the window: a new execution, from the start.
		b, closeB := openStream(t, context.Background(), c, p.url, "Idempotency-Key", "leaves", "X-Stainless-Retry-Count", "1")
		defer closeB()
		if e := readEvent(t, b); e != `data: {"n":1}` {
			t.Errorf("retry's first event %q", e)
		}
		if n := eng.calls.Load(); n != 2 {
			t.Errorf("%d upstream executions, want 2 (a new one after the window)", n)
		}
	})

	t.Run("a retry within cancel_after saves the execution", func(t *testing.T) {
		steps := make(chan struct{})
		eng := newFakeEngine(t, sseSteps(steps, 2))
		cfg := testConfig()
		cfg.CancelAfter = 5 * time.Second
		p := startProxy(t, cfg, eng.srv.URL)
		c := newClient(t)
		ctx, cancel := context.WithCancel(context.Background())
		a, closeA := openStream(t, ctx, c, p.url, "Idempotency-Key", "saved")
		readEvent(t, a)
		cancel()
		closeA()
		time.Sleep(50 * time.Millisecond)
		b, closeB := openStream(t, context.Background(), c, p.url, "Idempotency-Key", "saved")
		defer closeB()
		if e := readEvent(t, b); e != `data: {"n":1}` {
			t.Errorf("retry's replayed first event %q", e)
		}
		steps <- struct{}{}
		if e := readEvent(t, b); e != `data: {"n":2}` {
			t.Errorf("retry's live event %q", e)
		}
		if eng.calls.Load() != 1 || eng.cancelled.Load() != 0 {
			t.Errorf("executions %d, cancelled %d; want 1 and 0", eng.calls.Load(), eng.cancelled.Load())
		}
	})

	t.Run("without a key the upstream call is cancelled the moment the client leaves", func(t *testing.T) {
		steps := make(chan struct{})
		eng := newFakeEngine(t, sseSteps(steps, 1000))
		p := startProxy(t, testConfig(), eng.srv.URL)
		c := newClient(t)
		ctx, cancel := context.WithCancel(context.Background())
		a, closeA := openStream(t, ctx, c, p.url)
		readEvent(t, a)
		cancel()
		closeA()
		eventually(t, 200*time.Millisecond, "upstream cancelled at once", func() bool { return eng.cancelled.Load() == 1 })
		eventually(t, time.Second, "counted", func() bool {
			s := p.l.Stats()
			return s.CancelledImmediate == 1 && s.InFlight == 0
		})
	})
}

func TestFinishedResultsServeLateRetries(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		var status atomic.Int64
		status.Store(http.StatusOK)
		eng := newFakeEngine(t, func(w http.ResponseWriter, r *http.Request) {
			if s := int(status.Load()); s != http.StatusOK {
				w.WriteHeader(s)
				_, _ = io.WriteString(w, `{"error":{"message":"boom"}}`)
				return
			}
			okJSON(w, r)
		})
		cfg := testConfig()
		cfg.ResultTTL = time.Minute
		p := startProxy(t, cfg, eng.srv.URL)
		c := newClient(t)
		first := call(context.Background(), c, p.url, completionBody, "Idempotency-Key", "k")
		// The answer is out; the execution winds down just after.
		eventually(t, time.Second, "execution finished", func() bool { return p.l.Stats().Running == 0 })

		advance(30 * time.Second)
		again := call(context.Background(), c, p.url, completionBody, "Idempotency-Key", "k", "X-Stainless-Retry-Count", "1")
		if again.status != 200 || again.body != first.body {
			t.Errorf("retry within result_ttl: %d %q, want the stored %q", again.status, again.body, first.body)
		}
		if eng.calls.Load() != 1 || p.l.Stats().CoalescedStored != 1 {
			t.Errorf("executions %d stored hits %d, want 1 and 1", eng.calls.Load(), p.l.Stats().CoalescedStored)
		}
		other := call(context.Background(), c, p.url, `{"prompt":"another body"}`, "Idempotency-Key", "k")
		if other.status != 200 || eng.calls.Load() != 2 {
			t.Errorf("the same key with another body did not run as another call (executions %d)", eng.calls.Load())
		}

		eventually(t, time.Second, "execution finished", func() bool { return p.l.Stats().Running == 0 })
		advance(31 * time.Second)
		call(context.Background(), c, p.url, completionBody, "Idempotency-Key", "k")
		if n := eng.calls.Load(); n != 3 {
			t.Errorf("retry after result_ttl: %d executions, want 3", n)
		}

		status.Store(http.StatusInternalServerError)
		call(context.Background(), c, p.url, completionBody, "Idempotency-Key", "fails")
		eventually(t, time.Second, "execution finished", func() bool { return p.l.Stats().Running == 0 })
		status.Store(http.StatusOK)
		if a := call(context.Background(), c, p.url, completionBody, "Idempotency-Key", "fails"); a.status != 200 || eng.calls.Load() != 5 {
			t.Errorf("a 500 was served from the store (status %d, executions %d)", a.status, eng.calls.Load())
		}
	})
}
