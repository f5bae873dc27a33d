package calls

import (
	"container/list"
	"context"
	"net/http"
	"sync"
	"testing"
	"time"
)

// timers is a Clock whose timers run only when the test says.
type timers struct {
	mu  sync.Mutex
	set []*timer
}

type timer struct {
	d       time.Duration
	f       func()
	stopped bool
}

func (c *timers) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{d: d, f: f}
	c.set = append(c.set, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// fire runs the pending timers and reports their durations.
func (c *timers) fire() []time.Duration {
	c.mu.Lock()
	var run []*timer
	for _, t := range c.set {
		if !t.stopped {
			t.stopped = true
			run = append(run, t)
		}
	}
	c.set = nil
	c.mu.Unlock()
	var ds []time.Duration
	for _, t := range run {
		t.f()
		ds = append(ds, t.d)
	}
	return ds
}

type counts struct{ deferred, immediate int }

func newMemory(t *testing.T, cfg Config) (*Memory, *timers, *counts) {
	t.Helper()
	clk := &timers{}
	n := &counts{}
	return New(cfg, clk, Hooks{Deferred: func() { n.deferred++ }, Immediate: func() { n.immediate++ }}), clk, n
}

var (
	t0  = time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	cfg = Config{CancelAfter: 10 * time.Second, ResultTTL: time.Minute, StoreBytes: 1 << 20}
)

func ok(m *Memory, ex *Execution, body string) {
	m.Begin(ex, http.StatusOK, http.Header{"Content-Type": {"application/json"}})
	m.Append(ex, []byte(body))
}

func TestKeys(t *testing.T) {
	base := KeyOf("tenant", "idem", "POST", "/v1/completions", []byte(`{}`))
	for _, tc := range []struct {
		name string
		k    Key
		same bool
	}{
		{"the same call", KeyOf("tenant", "idem", "POST", "/v1/completions", []byte(`{}`)), true},
		{"another tenant", KeyOf("other", "idem", "POST", "/v1/completions", []byte(`{}`)), false},
		{"another idempotency key", KeyOf("tenant", "idem2", "POST", "/v1/completions", []byte(`{}`)), false},
		{"a reused key with another body", KeyOf("tenant", "idem", "POST", "/v1/completions", []byte(`{"a":1}`)), false},
		{"another path", KeyOf("tenant", "idem", "POST", "/v1/chat/completions", []byte(`{}`)), false},
		{"parts that run together differently", KeyOf("tenan", "tidem", "POST", "/v1/completions", []byte(`{}`)), false},
		{"a keyless fingerprint of the same request", Fingerprint("tenant", "POST", "/v1/completions", []byte(`{}`)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if (tc.k == base) != tc.same {
				t.Errorf("equal %v, want %v", tc.k == base, tc.same)
			}
		})
	}
	if Fingerprint("t", "POST", "/", nil) != Fingerprint("t", "POST", "/", nil) {
		t.Error("a fingerprint is not stable")
	}
}

// TestAKeyedCallRunsOnce: every attempt of a keyed call shares one
// execution while it runs, and a complete 2xx answer serves later ones.
func TestAKeyedCallRunsOnce(t *testing.T) {
	m, _, _ := newMemory(t, cfg)
	k := KeyOf("t", "call-1", "POST", "/v1/completions", []byte(`{}`))
	if res, ex, _ := m.Lookup(k, t0); res != nil || ex != nil {
		t.Fatal("an unknown call was found")
	}
	_, ex, first, created := m.Start(k, context.Background(), t0)
	if !created {
		t.Fatal("the first attempt did not create the execution")
	}
	ok(m, ex, `{"id":`)
	_, again, late := m.Lookup(k, t0)
	if again != ex {
		t.Fatal("a retry during the execution did not attach to it")
	}
	if _, _, _, created := m.Start(k, context.Background(), t0); created {
		t.Fatal("a second Start created a second execution")
	}
	m.Append(ex, []byte(`1}`))
	for name, cur := range map[string]*Cursor{"first": first, "late": late} {
		if p := ex.Next(cur); string(p.Chunk) != `{"id":1}` || p.Status != http.StatusOK {
			t.Errorf("%s listener read %q (%d), want the whole answer", name, p.Chunk, p.Status)
		}
	}
	m.Finish(ex, true, nil, t0)
	if p := ex.Next(first); !p.Done || !p.Complete || len(p.Chunk) != 0 {
		t.Errorf("after Finish: %+v", p)
	}
	if ex.Context().Err() == nil {
		t.Error("a finished execution's context is not cancelled")
	}
	res, ex2, _ := m.Lookup(k, t0.Add(time.Second))
	if ex2 != nil || res == nil || string(res.Body) != `{"id":1}` || res.Status != http.StatusOK {
		t.Fatalf("a late retry got %v %v, want the stored answer", res, ex2)
	}
	if res, _, _ := m.Lookup(k, t0.Add(cfg.ResultTTL+time.Second)); res != nil {
		t.Error("an answer older than result_ttl was served")
	}
}

func TestWhatIsStored(t *testing.T) {
	for _, tc := range []struct {
		name     string
		status   int
		complete bool
		broken   bool
		cfg      Config
		body     int
		stored   bool
	}{
		{"a complete 2xx answer", 200, true, false, cfg, 10, true},
		{"an answer cut short", 200, false, false, cfg, 10, false},
		{"an error answer", 500, true, false, cfg, 10, false},
		{"a stream that ended with an error event", 200, true, true, cfg, 10, false},
		{"no result_ttl", 200, true, false, Config{CancelAfter: time.Second, StoreBytes: 1 << 20}, 10, false},
		{"over a quarter of the store", 200, true, false, Config{ResultTTL: time.Minute, StoreBytes: 4000}, 1000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _, _ := newMemory(t, tc.cfg)
			k := Key{1}
			_, ex, _, _ := m.Start(k, context.Background(), t0)
			m.Begin(ex, tc.status, http.Header{})
			m.Append(ex, make([]byte, tc.body))
			if tc.broken {
				m.MarkBroken(ex)
			}
			m.Finish(ex, tc.complete, nil, t0)
			if res, _, _ := m.Lookup(k, t0); (res != nil) != tc.stored {
				t.Errorf("stored %v, want %v", res != nil, tc.stored)
			}
		})
	}
}

func TestTheStoreIsBoundedByBytes(t *testing.T) {
	m, _, _ := newMemory(t, Config{ResultTTL: time.Minute, StoreBytes: 4 * (256 + 500)})
	for i := range 6 {
		_, ex, _, _ := m.Start(Key{byte(i)}, context.Background(), t0)
		m.Begin(ex, 200, nil)
		m.Append(ex, make([]byte, 500))
		m.Finish(ex, true, nil, t0.Add(time.Duration(i)*time.Second))
	}
	results, bytes, _, _ := m.Stats()
	if results != 4 || bytes > 4*(256+500) {
		t.Errorf("%d results, %d bytes; want the 4 newest within the bound", results, bytes)
	}
	for i, want := range []bool{false, false, true, true, true, true} {
		if res, _, _ := m.Lookup(Key{byte(i)}, t0.Add(6*time.Second)); (res != nil) != want {
			t.Errorf("result %d kept %v, want %v (least recent leave first)", i, res != nil, want)
		}
	}
}

// TestWhenTheLastListenerLeaves: the execution is kept for cancel_after
// (longer for an SDK whose retry is due later) for a retry to attach, or
// cancelled at once when no retry could find it.
func TestWhenTheLastListenerLeaves(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       Config
		keyless   bool
		sdkRetry  int
		sent      bool
		kept      time.Duration // 0: cancelled at once
		reattach  bool          // a retry attaches before the timer
		cancelled bool
	}{
		{name: "keyed: kept for cancel_after", cfg: cfg, sdkRetry: -1, kept: 10 * time.Second, cancelled: true},
		{name: "keyed: a retry attaches in time", cfg: cfg, sdkRetry: -1, kept: 10 * time.Second, reattach: true},
		{name: "keyed: an SDK's fourth retry is due after cancel_after", cfg: Config{CancelAfter: time.Second},
			sdkRetry: 4, kept: 9 * time.Second, cancelled: true},
		{name: "keyed: an SDK's first retry within cancel_after", cfg: cfg, sdkRetry: 0, kept: 10 * time.Second, cancelled: true},
		{name: "keyed, cancel_after 0: at once", cfg: Config{}, sdkRetry: 2, cancelled: true},
		{name: "keyless from an SDK that saw nothing: an orphan", cfg: cfg, keyless: true, sdkRetry: 0,
			kept: 10 * time.Second, cancelled: true},
		{name: "keyless from a client that does not retry: at once", cfg: cfg, keyless: true, sdkRetry: -1, cancelled: true},
		{name: "keyless whose client saw part of it: at once", cfg: cfg, keyless: true, sdkRetry: 0, sent: true, cancelled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, clk, n := newMemory(t, tc.cfg)
			k := Key{7}
			var ex *Execution
			var cur *Cursor
			if tc.keyless {
				ex, cur = m.StartAdoptable(k, context.Background())
			} else {
				_, ex, cur, _ = m.Start(k, context.Background(), t0)
			}
			cur.SDKRetry = tc.sdkRetry
			m.Leave(ex, cur, tc.sent)
			// Kept for a retry, it is an orphan meanwhile.
			if _, _, _, orphans := m.Stats(); (orphans == 1) != (tc.kept > 0) {
				t.Errorf("orphans %d while kept for %v", orphans, tc.kept)
			}
			if tc.reattach {
				if _, again, _ := m.Lookup(k, t0); again != ex {
					t.Fatal("the retry did not attach")
				}
			}
			fired := clk.fire()
			switch {
			case tc.kept == 0 && len(fired) != 0:
				t.Errorf("timers %v, want none", fired)
			case tc.kept > 0 && !tc.reattach && (len(fired) != 1 || fired[0] != tc.kept):
				t.Errorf("kept for %v, want %v", fired, tc.kept)
			}
			if got := ex.Context().Err() != nil; got != tc.cancelled {
				t.Errorf("cancelled %v, want %v", got, tc.cancelled)
			}
			wantDeferred, wantImmediate := 0, 0
			if tc.cancelled && tc.kept > 0 {
				wantDeferred = 1
			} else if tc.cancelled {
				wantImmediate = 1
			}
			if n.deferred != wantDeferred || n.immediate != wantImmediate {
				t.Errorf("deferred %d immediate %d, want %d %d", n.deferred, n.immediate, wantDeferred, wantImmediate)
			}
		})
	}
}

// TestAKeylessOrphanIsAdoptedOnce: an orphan goes to one identical
// request; its stored answer too, and then it is gone.
func TestAKeylessOrphanIsAdoptedOnce(t *testing.T) {
	m, _, _ := newMemory(t, cfg)
	fp := Fingerprint("t", "POST", "/v1/completions", []byte(`{}`))
	ex, cur := m.StartAdoptable(fp, context.Background())
	if _, found, _ := m.Adopt(fp, t0); found != nil {
		t.Fatal("an execution with a live client was adopted")
	}
	cur.SDKRetry = 0
	m.Leave(ex, cur, false)
	_, adopted, cur2 := m.Adopt(fp, t0)
	if adopted != ex {
		t.Fatal("the orphan was not adopted")
	}
	if _, other, _ := m.Adopt(fp, t0); other != nil {
		t.Fatal("one orphan was adopted twice")
	}
	// Its new client leaves too, unanswered: an orphan again, and when it
	// finishes unheard its answer is stored for the next one.
	cur2.SDKRetry = 1
	m.Leave(ex, cur2, false)
	ok(m, ex, "done")
	m.Finish(ex, true, nil, t0)
	res, _, _ := m.Adopt(fp, t0)
	if res == nil || string(res.Body) != "done" {
		t.Fatalf("the unheard answer was not adopted: %v", res)
	}
	if res, _, _ := m.Adopt(fp, t0); res != nil {
		t.Error("a stored answer was adopted twice")
	}
}

func TestAnAnswerTooBigToReplayStopsCoalescing(t *testing.T) {
	m, _, _ := newMemory(t, cfg)
	k := Key{9}
	_, ex, first, _ := m.Start(k, context.Background(), t0)
	m.Begin(ex, 200, nil)
	m.Append(ex, make([]byte, maxReplayBytes+1))
	if _, again, _ := m.Lookup(k, t0); again != nil {
		t.Error("a late listener attached to an answer no longer kept whole")
	}
	if p := ex.Next(first); len(p.Chunk) != maxReplayBytes+1 {
		t.Errorf("the listener already there read %d bytes", len(p.Chunk))
	}
	m.Append(ex, []byte("more"))
	if ex.Whole() {
		t.Error("what every listener sent is still kept")
	}
	if p := ex.Next(first); string(p.Chunk) != "more" {
		t.Errorf("then read %q", p.Chunk)
	}
	m.Finish(ex, true, nil, t0)
	if res, _, _ := m.Lookup(k, t0); res != nil {
		t.Error("an answer not kept whole was stored")
	}
}

type failure struct{ code int }

func (f failure) Write(w http.ResponseWriter) { w.WriteHeader(f.code) }

func TestAFailureBeforeTheAnswerReachesEveryListener(t *testing.T) {
	m, _, _ := newMemory(t, cfg)
	_, ex, cur, _ := m.Start(Key{3}, context.Background(), t0)
	_, _, late := m.Lookup(Key{3}, t0)
	m.Finish(ex, false, failure{503}, t0)
	for _, c := range []*Cursor{cur, late} {
		if p := ex.Next(c); !p.Done || p.Started || p.Failure != (failure{503}) {
			t.Errorf("listener read %+v, want the failure", p)
		}
	}
}

func TestSeenKeys(t *testing.T) {
	m, _, _ := newMemory(t, cfg)
	k := Key{5}
	if seen, _, _ := m.MarkSeen(k, t0); seen {
		t.Fatal("a first attempt was seen")
	}
	m.MarkGaveUp(k, 30*time.Second)
	if m.GaveUp() != 1 {
		t.Errorf("GaveUp %d, want 1", m.GaveUp())
	}
	seen, executed, gaveUp := m.MarkSeen(k, t0.Add(time.Second))
	if !seen || executed || gaveUp != 30*time.Second {
		t.Errorf("retry: seen %v executed %v gaveUp %v; want true false 30s", seen, executed, gaveUp)
	}
	if m.GaveUp() != 0 {
		t.Error("a give-up was reported twice")
	}
	m.MarkExecuted(k, t0.Add(time.Second))
	if _, executed, _ := m.MarkSeen(k, t0.Add(2*time.Second)); !executed {
		t.Error("an executed call's retry does not know it")
	}
	if seen, executed, _ := m.MarkSeen(k, t0.Add(2*time.Second+seenTTL+time.Second)); seen || executed {
		t.Error("a key older than its memory was still seen")
	}
	fp := Fingerprint("t", "POST", "/", nil)
	m.MarkUnanswered(fp, true, t0)
	if seen, executed := m.Unanswered(fp, t0.Add(time.Second)); !seen || !executed {
		t.Errorf("unanswered: %v %v", seen, executed)
	}
	m.Forget(fp)
	if seen, _ := m.Unanswered(fp, t0.Add(time.Second)); seen {
		t.Error("a forgotten call is still unanswered")
	}
}

func TestSeenKeysAreBoundedByCount(t *testing.T) {
	s := &seenKeys{ttl: seenTTL, max: 3, byKey: map[Key]*list.Element{}}
	for i := range 5 {
		s.mark(Key{byte(i)}, t0)
	}
	if len(s.byKey) != 3 || s.lru.Len() != 3 {
		t.Fatalf("%d keys kept, want 3", len(s.byKey))
	}
	if seen, _, _ := s.mark(Key{0}, t0); seen {
		t.Error("the oldest key outlived the bound")
	}
}

func TestCloseAllCancelsEveryExecution(t *testing.T) {
	m, _, _ := newMemory(t, cfg)
	_, a, _, _ := m.Start(Key{1}, context.Background(), t0)
	_, b, _, _ := m.Start(Key{2}, context.Background(), t0)
	m.CloseAll()
	if a.Context().Err() == nil || b.Context().Err() == nil {
		t.Error("a running execution outlived CloseAll")
	}
}
