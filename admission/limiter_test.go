package admission

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

func TestTheCapIsNeverExceededUnderConcurrentLoad(t *testing.T) {
	eng := newFakeEngine(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond)
		okJSON(w, r)
	})
	cfg := testConfig()
	cfg.MaxInFlight = 4
	cfg.MaxQueue = 64
	p := startProxy(t, cfg, eng.srv.URL)
	c := newClient(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				a := call(context.Background(), c, p.url, completionBody)
				mu.Lock()
				codes[a.status]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if peak := eng.peak.Load(); peak > 4 {
		t.Errorf("the engine saw %d requests at once, cap is 4", peak)
	}
	if codes[200] != 200 {
		t.Errorf("answers by status %v, want all 200 (the queue holds 64)", codes)
	}
	s := p.l.Stats()
	if s.InFlight != 0 || s.QueueDepth != 0 {
		t.Errorf("after the load: in-flight %d, queue %d, want 0 and 0", s.InFlight, s.QueueDepth)
	}
	if s.Queued == 0 || s.Admitted != 200 || s.Executions != 200 || s.Calls != 200 {
		t.Errorf("stats %+v: want 200 calls, admitted and executions, some queued", s)
	}
}

func TestTheQueueIsBoundedByCountAndAge(t *testing.T) {
	for _, tc := range []struct {
		name       string
		order      string
		wantOldest int // status the oldest waiter gets when one more arrives
		wantNewest int
	}{
		{"fifo turns the newcomer away when the queue is full", "fifo", http.StatusOK, http.StatusServiceUnavailable},
		{"newest first turns the oldest waiter away to make room", "newest_first", http.StatusServiceUnavailable, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			eng := newFakeEngine(t, blockUntil(release))
			cfg := testConfig()
			cfg.MaxInFlight = 1
			cfg.MaxQueue = 2
			cfg.Order = tc.order
			p := startProxy(t, cfg, eng.srv.URL)
			c := newClient(t)
			results := make([]chan answer, 4)
			for i := range results {
				results[i] = make(chan answer, 1)
				go func() { results[i] <- call(context.Background(), c, p.url, completionBody) }()
				// Wait until request i holds the slot or sits in the queue,
				// so their order is known.
				eventually(t, 2*time.Second, "request admitted or queued", func() bool {
					s := p.l.Stats()
					return s.InFlight+s.QueueDepth+int(s.Rejected[ReasonQueueFull]) == i+1
				})
			}
			if d := p.l.Stats().QueueDepth; d != 2 {
				t.Fatalf("queue depth %d, want the bound 2", d)
			}
			var rejected answer
			var oldest, newest int
			if tc.order == "fifo" {
				rejected = <-results[3]
			} else {
				rejected = <-results[1]
			}
			checkRejection(t, rejected, http.StatusServiceUnavailable, ReasonQueueFull, true)
			close(release)
			for i, ch := range results {
				if (tc.order == "fifo" && i == 3) || (tc.order != "fifo" && i == 1) {
					continue
				}
				a := <-ch
				if a.status != http.StatusOK {
					t.Errorf("request %d: status %d", i, a.status)
				}
			}
			oldest, newest = http.StatusOK, http.StatusOK
			if tc.order == "fifo" {
				newest = rejected.status
			} else {
				oldest = rejected.status
			}
			if oldest != tc.wantOldest || newest != tc.wantNewest {
				t.Errorf("oldest waiter %d, newcomer %d; want %d, %d", oldest, newest, tc.wantOldest, tc.wantNewest)
			}
		})
	}

	// slotTaken is a limiter with one slot, held by a call the engine
	// answers only at the end of the test.
	slotTaken := func(t *testing.T, maxQueueWait time.Duration) (proxy, *http.Client) {
		release := make(chan struct{})
		eng := newFakeEngine(t, blockUntil(release))
		cfg := testConfig()
		cfg.MaxInFlight = 1
		cfg.MaxQueueWait = maxQueueWait
		// An engine that answers nothing is a stall to the suspicion,
		// which holds the queue (hangwindow_test.go); these are the
		// queue's own bounds.
		cfg.SuspectStalls = false
		p := startProxy(t, cfg, eng.srv.URL)
		// Registered after the proxy's cleanup, so it runs first: the
		// server shuts down only once the held call is answered.
		t.Cleanup(func() { close(release) })
		c := newClient(t)
		go call(context.Background(), c, p.url, completionBody)
		eventually(t, 2*time.Second, "slot taken", func() bool { return p.l.Stats().InFlight == 1 })
		return p, c
	}

	t.Run("a waiter is turned away once it waited max_queue_wait", func(t *testing.T) {
		p, c := slotTaken(t, 150*time.Millisecond)
		start := time.Now()
		a := call(context.Background(), c, p.url, completionBody)
		waited := time.Since(start)
		checkRejection(t, a, http.StatusServiceUnavailable, ReasonQueueTimeout, true)
		if waited < 140*time.Millisecond || waited > time.Second {
			t.Errorf("rejected after %v, want about 150ms", waited)
		}
	})

	t.Run("the client's own timeout halves the wait it is given", func(t *testing.T) {
		p, c := slotTaken(t, 10*time.Second)
		start := time.Now()
		a := call(context.Background(), c, p.url, completionBody, "X-Stainless-Timeout", "0.3")
		checkRejection(t, a, http.StatusServiceUnavailable, ReasonQueueTimeout, true)
		if waited := time.Since(start); waited > time.Second {
			t.Errorf("waited %v with a 0.3 s client timeout", waited)
		}
	})
}

func TestAWaiterWhoseClientLeftIsDroppedAtOnce(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	eng := newFakeEngine(t, blockUntil(release))
	cfg := testConfig()
	cfg.MaxInFlight = 1
	p := startProxy(t, cfg, eng.srv.URL)
	c := newClient(t)
	go call(context.Background(), c, p.url, completionBody)
	eventually(t, 2*time.Second, "slot taken", func() bool { return p.l.Stats().InFlight == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { call(ctx, c, p.url, completionBody); close(done) }()
	eventually(t, 2*time.Second, "queued", func() bool { return p.l.Stats().QueueDepth == 1 })
	cancel()
	<-done
	left := time.Now()
	eventually(t, 200*time.Millisecond, "queue depth back to 0 after the client left", func() bool {
		return p.l.Stats().QueueDepth == 0
	})
	t.Logf("waiter removed %v after its client left", time.Since(left))
	if s := p.l.Stats(); s.QueueAbandoned != 1 || s.InFlight != 1 {
		t.Errorf("abandoned %d, in-flight %d; want 1 and 1", s.QueueAbandoned, s.InFlight)
	}
}

func TestStreamingPassesThroughUnbuffered(t *testing.T) {
	finish := make(chan struct{})
	eng := newFakeEngine(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-finish:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "data: {\"n\":2}\n\ndata: [DONE]\n\n")
	})
	p := startProxy(t, testConfig(), eng.srv.URL)
	c := newClient(t)
	resp, err := post(context.Background(), c, p.url, `{"prompt":"x","stream":true}`)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := resp.Header.Get("X-Accel-Buffering"); got != "no" {
		t.Errorf("X-Accel-Buffering %q, want no", got)
	}
	br := bufio.NewReader(resp.Body)
	got := make(chan string, 1)
	go func() { line, _ := br.ReadString('\n'); got <- line }()
	select {
	case line := <-got:
		if line != "data: {\"n\":1}\n" {
			t.Errorf("first line %q", line)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the first event did not arrive while the engine was still generating: the proxy buffers")
	}
	close(finish)
	rest, _ := io.ReadAll(br)
	if !strings.Contains(string(rest), "[DONE]") {
		t.Errorf("stream ended without [DONE]: %q", rest)
	}
}

func TestTheEngineKeyReplacesTheClientsKey(t *testing.T) {
	eng := newFakeEngine(t, okJSON)
	for _, tc := range []struct {
		name   string
		inject bool
		want   string
	}{
		{"with injection on, the engine sees only its own key", true, "Bearer " + engineKey},
		{"with injection off, the client's key passes", false, "Bearer client-key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.InjectAPIKey = tc.inject
			hook := logtest.NewGlobal()
			lg, lhook := logtest.NewNullLogger()
			lg.SetLevel(logrus.DebugLevel)
			p := startProxy(t, cfg, eng.srv.URL, WithLogger(logrus.NewEntry(lg)))
			c := newClient(t)
			a := call(context.Background(), c, p.url, completionBody, "Authorization", "Bearer client-key")
			if a.status != http.StatusOK {
				t.Fatalf("status %d", a.status)
			}
			eng.mu.Lock()
			got := eng.auth[len(eng.auth)-1]
			eng.mu.Unlock()
			if got != tc.want {
				t.Errorf("engine saw Authorization %q, want %q", got, tc.want)
			}
			for _, e := range append(lhook.AllEntries(), hook.AllEntries()...) {
				if s, _ := e.String(); strings.Contains(s, engineKey) || strings.Contains(s, "client-key") {
					t.Errorf("a log line carries a key: %s", s)
				}
			}
		})
	}
}

func TestReadsPassThroughUncappedAndEverythingElseIsCapped(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	eng := newFakeEngine(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
		case "/health":
			w.WriteHeader(http.StatusOK)
		default:
			blockUntil(release)(w, r)
		}
	})
	cfg := testConfig()
	cfg.MaxInFlight = 1
	cfg.MaxQueue = 0
	p := startProxy(t, cfg, eng.srv.URL)
	c := newClient(t)
	go call(context.Background(), c, p.url, completionBody)
	eventually(t, 2*time.Second, "slot taken", func() bool { return p.l.Stats().InFlight == 1 })
	for _, path := range []string{"/v1/models", "/health"} {
		resp, err := c.Get(p.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s with the cap full: %d, want 200", path, resp.StatusCode)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, p.url+"/tokenize", strings.NewReader(`{}`))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("POST /tokenize with the cap full and no queue: %d, want 503 (capped)", resp.StatusCode)
	}
	if s := p.l.Stats(); s.PassedThrough != 2 {
		t.Errorf("passed through %d, want 2", s.PassedThrough)
	}
}

func TestRecoveryHoldsThenRampsTheCap(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		eng := newFakeEngine(t, okJSON)
		cfg := testConfig()
		cfg.MaxInFlight = 100
		cfg.SlowStart = 100 * time.Second
		p := startProxy(t, cfg, eng.srv.URL)
		c := newClient(t)

		p.l.SetRecovering(true)
		held := make(chan answer, 1)
		go func() { held <- call(context.Background(), c, p.url, completionBody) }()
		advance(10 * time.Second) // five times its queue wait: held, not refused
		if eng.calls.Load() != 0 || p.l.Stats().QueueDepth != 1 {
			t.Errorf("engine calls %d, queue depth %d; want the call held for the engine", eng.calls.Load(), p.l.Stats().QueueDepth)
		}
		p.l.SetRecovering(false)
		if a := <-held; a.status != http.StatusOK {
			t.Errorf("the held call: status %d, want 200 once the engine is back", a.status)
		}
		p.l.SlowStart() // the recovery's call once the engine serves again
		for _, step := range []struct {
			after time.Duration
			want  int
		}{{0, 10}, {50 * time.Second, 55}, {49 * time.Second, 99}, {2 * time.Second, 100}} {
			advance(step.after)
			if got := p.l.Stats().Cap; got != step.want {
				t.Errorf("slow start: cap %d, want %d", got, step.want)
			}
		}
		if a := call(context.Background(), c, p.url, completionBody); a.status != http.StatusOK {
			t.Errorf("after recovery: status %d", a.status)
		}
	})
}

func TestControlSurface(t *testing.T) {
	eng := newFakeEngine(t, okJSON)
	cfg := testConfig()
	cfg.MaxInFlight = 40
	p := startProxy(t, cfg, eng.srv.URL)
	l := p.l

	t.Run("saturation admits three quarters of a fixed cap until it clears", func(t *testing.T) {
		l.SetSaturated(true)
		if s := l.Stats(); s.Cap != 30 || !s.Saturated {
			t.Errorf("saturated: cap %d (saturated=%v), want 30", s.Cap, s.Saturated)
		}
		l.SetSaturated(false)
		if c := l.Stats().Cap; c != 40 {
			t.Errorf("cleared: cap %d, want 40", c)
		}
	})
	t.Run("an override sets a fixed cap and 0 restores the automatic one", func(t *testing.T) {
		l.SetMaxInFlight(7)
		if l.MaxInFlight() != 7 || l.Stats().Cap != 7 {
			t.Errorf("MaxInFlight %d cap %d, want 7", l.MaxInFlight(), l.Stats().Cap)
		}
		l.SetMaxInFlight(0)
		if s := l.Stats(); l.MaxInFlight() != 0 || !s.Automatic || s.Cap != autoInitial {
			t.Errorf("automatic: MaxInFlight %d, automatic %v, cap %d; want 0, true, %d", l.MaxInFlight(), s.Automatic, s.Cap, autoInitial)
		}
	})
	t.Run("saturation cuts the automatic cap once", func(t *testing.T) {
		l.SetSaturated(true)
		if c := l.Stats().Cap; c != 12 {
			t.Errorf("cap %d, want 12", c)
		}
		l.SetSaturated(false)
	})
}

func TestMetricsAreRegisteredAndCount(t *testing.T) {
	eng := newFakeEngine(t, okJSON)
	reg := prometheus.NewRegistry()
	p := startProxy(t, testConfig(), eng.srv.URL, WithRegisterer(reg))
	c := newClient(t)
	call(context.Background(), c, p.url, completionBody)
	call(context.Background(), c, p.url, "{not json")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"vigil_admission_calls_total", "vigil_admission_executions_total",
		"vigil_admission_rejected_total", "vigil_admission_coalesced_total", "vigil_admission_cancelled_total",
		"vigil_admission_queue_depth", "vigil_admission_oldest_queued_seconds", "vigil_admission_in_flight",
		"vigil_admission_cap", "vigil_admission_retries_total", "vigil_admission_admitted_total", "vigil_admission_queued_total"} {
		if !names[n] {
			t.Errorf("metric %s missing", n)
		}
	}
	if v := testutil.ToFloat64(&collectorView{reg: reg, name: "vigil_admission_executions_total"}); v != 1 {
		t.Errorf("executions_total %v, want 1", v)
	}
	if _, err := New(testConfig(), mustURL(eng.srv.URL), "", WithRegisterer(reg)); err == nil {
		t.Error("a second limiter on the same registry registered without error")
	}
}

// collectorView re-exposes one gathered metric family for testutil.
type collectorView struct {
	reg  *prometheus.Registry
	name string
}

func (v *collectorView) Describe(chan<- *prometheus.Desc) {}
func (v *collectorView) Collect(ch chan<- prometheus.Metric) {
	mfs, _ := v.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == v.name {
			for _, m := range mf.GetMetric() {
				ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(v.name, "x", nil, nil),
					prometheus.CounterValue, m.GetCounter().GetValue())
			}
		}
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(fmt.Sprintf("bad url %q", s))
	}
	return u
}

// panicWriter fails the way a broken handler path would: by panicking in
// the middle of writing the answer.
type panicWriter struct{ h http.Header }

func (p *panicWriter) Header() http.Header       { return p.h }
func (p *panicWriter) WriteHeader(int)           {}
func (p *panicWriter) Write([]byte) (int, error) { panic("write exploded") }

func TestEveryExitFreesTheSlot(t *testing.T) {
	t.Run("a panic while writing the answer", func(t *testing.T) {
		eng := newFakeEngine(t, okJSON)
		u, _ := url.Parse(eng.srv.URL)
		l, err := New(testConfig(), u, engineKey)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		for _, key := range []string{"", "keyed"} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("key %q: no panic reached the server", key)
					}
				}()
				req := httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(completionBody))
				if key != "" {
					req.Header.Set("Idempotency-Key", key)
				}
				l.Handler().ServeHTTP(&panicWriter{h: http.Header{}}, req)
			}()
			eventually(t, time.Second, "slot freed after the panic", func() bool { return l.Stats().InFlight == 0 })
		}
	})

	t.Run("an unreachable engine is a 502 with Retry-After and no slot held", func(t *testing.T) {
		dead := httptest.NewServer(http.NotFoundHandler())
		deadURL := dead.URL
		dead.Close()
		p := startProxy(t, testConfig(), deadURL)
		c := newClient(t)
		for _, hdr := range [][]string{nil, {"Idempotency-Key", "to-nowhere"}} {
			a := call(context.Background(), c, p.url, completionBody, hdr...)
			checkRejection(t, a, http.StatusBadGateway, "upstream_error", true)
		}
		if s := p.l.Stats(); s.InFlight != 0 || s.UpstreamErrors != 2 {
			t.Errorf("in-flight %d, upstream errors %d; want 0 and 2", s.InFlight, s.UpstreamErrors)
		}
	})
}

func TestAFailedRecoveryLeavesTheCapAsItWas(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		eng := newFakeEngine(t, okJSON)
		cfg := testConfig()
		cfg.MaxInFlight = 100
		cfg.SlowStart = 100 * time.Second
		p := startProxy(t, cfg, eng.srv.URL)
		p.l.SetRecovering(true)
		p.l.SetRecovering(false) // the restart failed: no slow start
		if got := p.l.Stats().Cap; got != 100 {
			t.Fatalf("cap after a failed recovery = %d, want 100", got)
		}
	})
}

func TestAKeyedCallKeepsItsQueuePlaceAcrossAttempts(t *testing.T) {
	release := make(chan struct{})
	eng, order := attemptOrderEngine(t, blockUntil(release))
	cfg := testConfig()
	cfg.MaxInFlight = 1
	cfg.Order = "fifo"
	cfg.CancelAfter = 10 * time.Second // the retry comes well within it
	p := startProxy(t, cfg, eng.srv.URL)
	c := newClient(t)
	go call(context.Background(), c, p.url, completionBody, "X-Attempt", "blocker")
	eventually(t, 2*time.Second, "slot taken", func() bool { return p.l.Stats().InFlight == 1 })

	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan struct{})
	go func() {
		call(ctx, c, p.url, completionBody, "Idempotency-Key", "call-a", "X-Attempt", "a-1")
		close(first)
	}()
	eventually(t, 2*time.Second, "the keyed call queued", func() bool { return p.l.Stats().QueueDepth == 1 })
	unkeyed := make(chan answer, 1)
	go func() { unkeyed <- call(context.Background(), c, p.url, completionBody, "X-Attempt", "b") }()
	eventually(t, 2*time.Second, "an unkeyed call queued behind it", func() bool { return p.l.Stats().QueueDepth == 2 })

	cancel() // the keyed call's client times out
	<-first
	eventually(t, 2*time.Second, "its place held", func() bool {
		s := p.l.Stats()
		return s.QueueHeld == 1 && s.QueueDepth == 1
	})
	retried := make(chan answer, 1)
	go func() {
		retried <- call(context.Background(), c, p.url, completionBody,
			"Idempotency-Key", "call-a", "X-Stainless-Retry-Count", "1", "X-Attempt", "a-2")
	}()
	eventually(t, 2*time.Second, "the retry took the place over", func() bool {
		s := p.l.Stats()
		return s.QueueHeld == 0 && s.QueueDepth == 2
	})
	close(release)
	if a := <-retried; a.status != 200 {
		t.Fatalf("retry: %d %s", a.status, a.body)
	}
	if a := <-unkeyed; a.status != 200 {
		t.Fatalf("unkeyed call: %d %s", a.status, a.body)
	}
	if got, want := order(), []string{"blocker", "a-2", "b"}; !slices.Equal(got, want) {
		t.Errorf("the engine got %v, want %v (the retry served from its first attempt's place, ahead of b)", got, want)
	}
}

// attemptOrderEngine is an engine that notes the X-Attempt header of each
// request reaching it, in order, then answers with then; order reads the
// notes so far.
func attemptOrderEngine(t *testing.T, then http.HandlerFunc) (eng *fakeEngine, order func() []string) {
	var mu sync.Mutex
	var seen []string
	eng = newFakeEngine(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("X-Attempt"))
		mu.Unlock()
		then(w, r)
	})
	return eng, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

func TestAHeldQueuePlaceIsNeverAdmitted(t *testing.T) {
	release := make(chan struct{})
	eng := newFakeEngine(t, blockUntil(release))
	cfg := testConfig()
	cfg.MaxInFlight = 1
	cfg.CancelAfter = 400 * time.Millisecond
	p := startProxy(t, cfg, eng.srv.URL)
	c := newClient(t)
	blocker := make(chan answer, 1)
	go func() { blocker <- call(context.Background(), c, p.url, completionBody) }()
	eventually(t, 2*time.Second, "slot taken", func() bool { return p.l.Stats().InFlight == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan struct{})
	go func() { call(ctx, c, p.url, completionBody, "Idempotency-Key", "gone"); close(left) }()
	eventually(t, 2*time.Second, "queued", func() bool { return p.l.Stats().QueueDepth == 1 })
	cancel()
	<-left
	eventually(t, time.Second, "its place held", func() bool { return p.l.Stats().QueueHeld == 1 })

	// The slot frees while the place is held: nothing is admitted for it,
	// and a newcomer does not wait behind it.
	close(release)
	if a := <-blocker; a.status != 200 {
		t.Fatalf("blocker: %d", a.status)
	}
	if s := p.l.Stats(); s.InFlight != 0 || s.QueueHeld != 1 {
		t.Fatalf("in flight %d, held %d after the slot freed; want 0 and 1", s.InFlight, s.QueueHeld)
	}
	if a := call(context.Background(), c, p.url, completionBody); a.status != 200 {
		t.Fatalf("newcomer while a place is held: %d", a.status)
	}
	eventually(t, 2*time.Second, "the place dropped after cancel_after", func() bool {
		s := p.l.Stats()
		return s.QueueHeld == 0 && s.QueueDepth == 0
	})
	if n := eng.calls.Load(); n != 2 {
		t.Errorf("the engine got %d calls, want 2 (a held place never reaches it)", n)
	}
	if s := p.l.Stats(); s.InFlight != 0 || s.Admitted != 2 {
		t.Errorf("in flight %d, admitted %d; want 0 and 2", s.InFlight, s.Admitted)
	}
}

func TestTheQueueIsBoundedByTheBytesItHolds(t *testing.T) {
	for _, order := range []string{"newest_first", "fifo"} {
		t.Run(order+" keeps the queue within max_queue_bytes", func(t *testing.T) {
			release := make(chan struct{})
			defer close(release)
			eng := newFakeEngine(t, blockUntil(release))
			cfg := testConfig()
			cfg.MaxInFlight = 1
			cfg.Order = order
			cfg.MaxQueueBytes = int64(2*len(completionBody) + 10) // two bodies fit, not three
			p := startProxy(t, cfg, eng.srv.URL)
			c := newClient(t)
			go call(context.Background(), c, p.url, completionBody)
			eventually(t, 2*time.Second, "slot taken", func() bool { return p.l.Stats().InFlight == 1 })
			answers := make([]chan answer, 3)
			for i := range answers {
				answers[i] = make(chan answer, 1)
				go func() { answers[i] <- call(context.Background(), c, p.url, completionBody) }()
				if i < 2 {
					eventually(t, 2*time.Second, "queued", func() bool { return p.l.Stats().QueueDepth == i+1 })
				}
			}
			turnedAway := 0 // newest_first: the oldest makes room
			if order == "fifo" {
				turnedAway = 2 // fifo: the newcomer is refused
			}
			checkRejection(t, <-answers[turnedAway], http.StatusServiceUnavailable, ReasonQueueFull, true)
			if s := p.l.Stats(); s.QueueDepth != 2 {
				t.Errorf("queue depth %d, want 2", s.QueueDepth)
			}
		})
	}
}

func TestNewestFirstServesFirstAttemptsThenTheOldestRetry(t *testing.T) {
	// The engine holds each request until told.
	step := make(chan struct{})
	eng, order := attemptOrderEngine(t, func(w http.ResponseWriter, r *http.Request) {
		<-step
		okJSON(w, r)
	})
	cfg := testConfig()
	cfg.MaxInFlight = 1
	cfg.Order = "newest_first"
	p := startProxy(t, cfg, eng.srv.URL)
	c := newClient(t)
	done := make(chan answer, 5)
	send := func(name string, hdr ...string) {
		go func() {
			done <- call(context.Background(), c, p.url, completionBody, append(hdr, "X-Attempt", name)...)
		}()
	}
	send("blocker")
	eventually(t, 2*time.Second, "slot taken", func() bool { return p.l.Stats().InFlight == 1 })
	for i, w := range []struct {
		name  string
		retry bool
	}{{"retry-old", true}, {"first-old", false}, {"retry-new", true}, {"first-new", false}} {
		if w.retry {
			send(w.name, "X-Stainless-Retry-Count", "1")
		} else {
			send(w.name)
		}
		eventually(t, 2*time.Second, w.name+" queued", func() bool { return p.l.Stats().QueueDepth == i+1 })
	}
	for range 5 {
		step <- struct{}{}
		if a := <-done; a.status != http.StatusOK {
			t.Fatalf("status %d: %s", a.status, a.body)
		}
	}
	// The first attempts wait well within a few answers' patience (their
	// timeout unknown), so the oldest goes first, as its deadline is the
	// earliest; retries go after every first attempt, oldest call first.
	want := []string{"blocker", "first-old", "first-new", "retry-old", "retry-new"}
	if got := order(); !slices.Equal(got, want) {
		t.Errorf("the engine got %v, want %v (first attempts on time oldest first, then retries oldest first)", got, want)
	}
}

func TestClientTimeoutReadsTheSDKsHeader(t *testing.T) {
	for _, tc := range []struct {
		header string
		want   time.Duration
	}{
		{"120", 120 * time.Second},
		{"0.5", 500 * time.Millisecond},
		{"", 0},
		{"soon", 0},
		{"0", 0},
		{"-5", 0},
		{"NaN", 0},
		{"Inf", 0},
		{"1e300", 0},
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/completions", nil)
		if tc.header != "" {
			r.Header.Set("X-Stainless-Timeout", tc.header)
		}
		if got := clientTimeout(r); got != tc.want {
			t.Errorf("X-Stainless-Timeout %q: %v, want %v", tc.header, got, tc.want)
		}
	}
}
