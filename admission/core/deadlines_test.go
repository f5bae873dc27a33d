package core

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

func TestAClientsTimeoutIsAnnouncedElseInferred(t *testing.T) {
	const listedKey = "aa"
	cfg := testConfig()
	cfg.ClientTimeouts = []configs.RouteTimeout{{Path: "/v1/chat/completions", Timeout: 60 * time.Second}}
	cfg.Tenants.Keys = []configs.TenantEntry{{Name: "batch", KeySHA256: listedKey,
		TenantLimits: configs.TenantLimits{ClientTimeout: 600 * time.Second}}}
	l := New(cfg)
	for range 3 {
		l.GaveUp("/v1/completions", 6*time.Second)
		l.GaveUp("/v1/chat/completions", 6*time.Second)
	}
	l.GaveUp("/v1/embeddings", 6*time.Second) // one give-up is no evidence
	for _, tc := range []struct {
		name string
		r    Request
		want time.Duration
	}{
		{"announced, whatever else is known", Request{Timeout: 30 * time.Second, Route: "/v1/completions", Tenant: listedKey}, 30 * time.Second},
		{"the tenant's configured timeout", Request{Route: "/v1/chat/completions", Tenant: listedKey}, 600 * time.Second},
		{"the route's configured timeout, before what was learned", Request{Route: "/v1/chat/completions"}, 60 * time.Second},
		{"learned from the route's clients giving up", Request{Route: "/v1/completions"}, 6 * time.Second},
		{"too little evidence", Request{Route: "/v1/embeddings"}, 0},
		{"nothing known", Request{Route: "/other"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l.mu.Lock()
			defer l.mu.Unlock()
			if got := l.timeoutLocked(tc.r); got != tc.want {
				t.Errorf("timeout %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTheLearnedTimeoutIsTheMedianOfTheLastGiveUps(t *testing.T) {
	g := newGiveUps()
	for _, d := range []time.Duration{6, 6, 1, 6, 30} { // a user who cancelled at 1 s, one slow client
		g.add(d * time.Second)
	}
	if got := g.median(); got != 6*time.Second {
		t.Errorf("learned %v, want 6s", got)
	}
	for range giveUpSamples { // the clients changed their timeout
		g.add(20 * time.Second)
	}
	if got := g.median(); got != 20*time.Second {
		t.Errorf("learned %v after the clients changed, want 20s", got)
	}
	d := newDeadlines(nil)
	for i := range maxLearnedRoutes + 10 {
		d.gaveUp("/r"+string(rune('a'+i%26))+string(rune('a'+i/26)), time.Second)
	}
	if len(d.learned) != maxLearnedRoutes {
		t.Errorf("%d routes learned, want at most %d", len(d.learned), maxLearnedRoutes)
	}
}

// TestAStreamsBoundAndPlace: what bounds a stream's queue wait, and where
// it stands in the queue for the drain estimate.
func TestAStreamsBoundAndPlace(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*configs.Admission)
		// ttfts are first tokens the engine gave streams before (engineTTFT).
		ttfts []time.Duration
		r     Request
		want  time.Duration
	}{
		{"stream_queue_wait", func(c *configs.Admission) { c.StreamQueueWait = 700 * time.Millisecond },
			[]time.Duration{time.Second}, Request{Stream: true}, 700 * time.Millisecond},
		{"else ttft_target", func(c *configs.Admission) { c.TTFTTarget = configs.Fixed(1500 * time.Millisecond) },
			nil, Request{Stream: true}, 1500 * time.Millisecond},
		{"less the engine's own time to first token", func(c *configs.Admission) { c.TTFTTarget = configs.Fixed(1500 * time.Millisecond) },
			[]time.Duration{time.Second, time.Second}, Request{Stream: true}, 500 * time.Millisecond},
		{"at least a tenth of the target", func(c *configs.Admission) { c.TTFTTarget = configs.Fixed(1500 * time.Millisecond) },
			[]time.Duration{3 * time.Second}, Request{Stream: true}, 150 * time.Millisecond},
		{"else 10 s", func(c *configs.Admission) { c.TTFTTarget = configs.Fixed(0); c.MaxQueueWait = time.Minute },
			nil, Request{Stream: true}, defaultStreamWait},
		{"an announced timeout instead: half of it", func(c *configs.Admission) { c.MaxQueueWait = time.Minute },
			[]time.Duration{time.Second}, Request{Stream: true, Timeout: 60 * time.Second}, 30 * time.Second},
		{"an inferred one bounds it too", func(c *configs.Admission) {
			c.StreamQueueWait = 10 * time.Second
			c.ClientTimeouts = []configs.RouteTimeout{{Path: "/s", Timeout: 4 * time.Second}}
		}, nil, Request{Stream: true, Route: "/s"}, 2 * time.Second},
		{"a plain call keeps max_queue_wait", func(c *configs.Admission) { c.StreamQueueWait = time.Second },
			nil, Request{}, 2 * time.Second},
		{"auto, nothing measured: the objective's floor", func(c *configs.Admission) { c.TTFTTarget = configs.Automatic() },
			nil, Request{Stream: true}, 500 * time.Millisecond},
		{"auto, short first tokens: the objective less them", func(c *configs.Admission) { c.TTFTTarget = configs.Automatic() },
			[]time.Duration{100 * time.Millisecond, 100 * time.Millisecond}, Request{Stream: true}, 400 * time.Millisecond},
		{"auto, a retry, nothing measured: a person's patience, past the objective", func(c *configs.Admission) { c.TTFTTarget = configs.Automatic() },
			nil, Request{Stream: true, Retry: true}, autoStreamPatience},
		{"auto, a retry, short first tokens: that patience less them", func(c *configs.Admission) { c.TTFTTarget = configs.Automatic() },
			[]time.Duration{100 * time.Millisecond, 100 * time.Millisecond}, Request{Stream: true, Retry: true}, autoStreamPatience - 100*time.Millisecond},
		{"a configured ttft_target holds a retry to it", func(c *configs.Admission) { c.TTFTTarget = configs.Fixed(1500 * time.Millisecond) },
			[]time.Duration{time.Second, time.Second}, Request{Stream: true, Retry: true}, 500 * time.Millisecond},
		{"auto on a fixed cap: twice the streams' typical first token, less it", func(c *configs.Admission) { c.TTFTTarget = configs.Automatic() },
			[]time.Duration{time.Second, time.Second}, Request{Stream: true}, time.Second},
		{"auto on the automatic cap: twice the engine's lone prefill, less the typical first token", func(c *configs.Admission) {
			c.TTFTTarget, c.MaxInFlight, c.MaxQueueWait = configs.Automatic(), 0, time.Minute
		}, []time.Duration{3 * time.Second, 3 * time.Second, 3 * time.Second, 3 * time.Second, 3 * time.Second},
			Request{Stream: true}, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			tc.cfg(&cfg)
			l := New(cfg)
			for _, ttft := range tc.ttfts {
				lis, rj, err := l.Acquire(context.Background(), Request{Stream: true})
				if lis == nil {
					t.Fatalf("acquire: %v %v", rj, err)
				}
				lis.FirstToken(ttft)
				lis.Release(Outcome{})
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			if got := l.maxWaitLocked(tc.r, l.timeoutLocked(tc.r)); got != tc.want {
				t.Errorf("bound %v, want %v", got, tc.want)
			}
		})
	}

	// The queue, oldest first: a held place, a retry, two first attempts.
	for _, tc := range []struct {
		order string
		r     Request
		want  int
	}{
		{"fifo", Request{}, 3},
		{"newest_first", Request{}, 0},            // served next: the waiting first attempts are older
		{"newest_first", Request{Retry: true}, 3}, // behind every live waiter
	} {
		l := &Limiter{cfg: configs.Admission{Order: tc.order}, held: map[CallKey]*waiter{}}
		for _, k := range []string{"held", "retry", "first", "first"} {
			w := &waiter{queued: true, placeholder: k == "held", retry: k == "retry"}
			w.elem = l.waiters.PushBack(w)
			if w.placeholder {
				l.held[CallKey{1}] = w
			}
		}
		if got := l.positionLocked(tc.r, nil); got != tc.want {
			t.Errorf("%s, retry %v: position %d, want %d", tc.order, tc.r.Retry, got, tc.want)
		}
	}
}

// The door check turns a stream away when the queue would not reach it
// within its bound at the measured drain rate; in a busy period younger
// than that bound the rate counts its first admissions over a whole
// second and reads the burst's start as a slow engine. A fresh vigil
// with a 500 ms bound answered 503 to the second stream of a burst that
// the engine served in a step (internal/cli's restart test, 6 streams at
// once, when auto bounded streams by the objective); it now queues, and
// the check applies once the busy period has lasted the bound.
func TestABurstsStartIsNoSlowEngine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig()
		cfg.MaxInFlight = 0 // the automatic cap: first-token limit 1
		cfg.TTFTTarget = configs.Fixed(500 * time.Millisecond)
		l := New(cfg)
		first := mustAcquire(t, l, Request{Stream: true})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		second := acquireAsync(ctx, l, Request{Stream: true})
		untilQueued(t, l, 1) // before: 503 stream_deadline at once
		first.FirstToken(20 * time.Millisecond)
		a := get(t, second)
		if a.lis == nil {
			t.Fatalf("the second stream: %v %v, want a slot once the first's first token came", a.rj, a.err)
		}
		// The busy period (one stream awaiting its first token, the second)
		// now lasts past the bound: at one admission a second, the queue
		// would not reach a new stream within 500 ms.
		advance(600 * time.Millisecond)
		lis, rj, err := l.Acquire(ctx, Request{Stream: true})
		if lis != nil || err != nil || rj == nil || rj.Reason != ReasonStreamDeadline {
			t.Errorf("a stream 600 ms into the busy period: %v %v %v, want %s", lis, rj, err, ReasonStreamDeadline)
		}
		first.Release(Outcome{})
		a.lis.Release(Outcome{})
	})
}

// TestPatienceIsWhatTheClientsShow: under ttft_target auto a first
// attempt's stream waits up to the objective unless its route's clients
// came back for at least half the streams it turned away lately; then,
// like a retry, it waits up to a person's patience.
func TestPatienceIsWhatTheClientsShow(t *testing.T) {
	const route = "/v1/completions"
	first := Request{Stream: true, Route: route}
	back := Request{Stream: true, Route: route, Retry: true, NeverExecuted: true}
	type event struct {
		r          Request
		turnedAway bool
	}
	turned, cameBack := event{first, true}, event{back, false}
	repeat := func(n int, evs ...event) []event {
		var out []event
		for range n {
			out = append(out, evs...)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		ttft   time.Duration // 0: auto
		events []event
		want   time.Duration
	}{
		{"nothing seen: the objective", 0, nil, 500 * time.Millisecond},
		{"turned away, never back: the objective", 0, repeat(20, turned), 500 * time.Millisecond},
		{"every one turned away came back: patience", 0, repeat(5, turned, cameBack), autoStreamPatience},
		{"one in four came back: the objective", 0, repeat(6, turned, turned, turned, cameBack), 500 * time.Millisecond},
		{"they stopped coming back: the objective again", 0,
			append(repeat(5, turned, cameBack), repeat(12, turned)...), 500 * time.Millisecond},
		{"two in five come back: patient stays patient", 0,
			append(repeat(5, turned, cameBack), repeat(6, turned, cameBack, turned, turned, cameBack, turned, turned)...),
			autoStreamPatience},
		{"two in five come back: the objective stays the bound", 0,
			append(repeat(10, turned), repeat(6, turned, cameBack, turned, turned, cameBack, turned, turned)...),
			500 * time.Millisecond},
		{"a retry that had run is no comeback", 0,
			append(repeat(5, turned), repeat(5, event{Request{Stream: true, Route: route, Retry: true}, false})...),
			500 * time.Millisecond},
		{"another route's clients say nothing of this one's", 0,
			repeat(5, event{Request{Stream: true, Route: "/other"}, true}, event{Request{Stream: true, Route: "/other", Retry: true, NeverExecuted: true}, false}),
			500 * time.Millisecond},
		{"streams with an announced timeout are not counted", 0,
			repeat(5, event{Request{Stream: true, Route: route, Timeout: time.Minute}, true},
				event{Request{Stream: true, Route: route, Timeout: time.Minute, Retry: true, NeverExecuted: true}, false}),
			500 * time.Millisecond},
		{"a configured ttft_target is the bound whatever the clients do", 1500 * time.Millisecond,
			repeat(5, turned, cameBack), 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.TTFTTarget, cfg.MaxQueueWait = configs.Automatic(), time.Minute
			if tc.ttft > 0 {
				cfg.TTFTTarget = configs.Fixed(tc.ttft)
			}
			l := New(cfg)
			l.mu.Lock()
			for _, ev := range tc.events {
				l.noteStreamLocked(ev.r, ev.turnedAway)
			}
			got := l.maxWaitLocked(first, 0)
			l.mu.Unlock()
			if got != tc.want {
				t.Errorf("a first attempt's bound %v, want %v", got, tc.want)
			}
			patient := slices.Contains(l.Stats().PatientRoutes, route)
			if want := got == autoStreamPatience; patient != want {
				t.Errorf("stats list %q as patient: %v, want %v", route, patient, want)
			}
		})
	}
}

// TestAPlainCallsWaitLeavesItsAnswersSlowEnd: a plain call with a known
// timeout waits until only its answer's leeway is left of it: two typical
// answers until 16 are measured, then the slow end (p95) of the last 64
// and a tenth more. Issue 41: two typical answers of 1 s left the
// engine idle the last second before the burst's last deadline.
func TestAPlainCallsWaitLeavesItsAnswersSlowEnd(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	repeat := func(d time.Duration, n int) []time.Duration {
		s := make([]time.Duration, n)
		for i := range s {
			s[i] = d
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		typical time.Duration   // engineService (kept across a restart)
		answers []time.Duration // measured since, oldest first
		want    time.Duration   // the wait of a call with a 6 s timeout
	}{
		{"nothing measured: no bound of its own", 0, nil, 0},
		{"a typical answer kept, none measured: two of them", time.Second, nil, 4 * time.Second},
		{"15 measured: still two typical ones", time.Second, repeat(time.Second, 15), 4 * time.Second},
		{"answers of 1 s at a full batch: 1.1 s of them", time.Second, repeat(time.Second, 64), ms(4900)},
		{"one in ten takes 3 s: the slow end rules", time.Second,
			append(repeat(time.Second, 57), repeat(3*time.Second, 7)...), ms(2700)},
		{"slow answers gone by: the last 64 judge", time.Second,
			append(repeat(3*time.Second, 64), repeat(time.Second, 64)...), ms(4900)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New(testConfig())
			l.cfg.MaxQueueWait = time.Minute
			l.engineService = tc.typical
			for _, d := range tc.answers {
				l.answers.add(d)
			}
			if got := l.plainWaitLocked(6 * time.Second); got != tc.want {
				t.Errorf("a 6 s call waits up to %v, want %v", got, tc.want)
			}
		})
	}
}
