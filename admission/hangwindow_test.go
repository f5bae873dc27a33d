package admission

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// The hang window: calls sent to a hung engine's vigil between the hang
// and the watchdog's verdict (here 4 s, past every queue bound), with the
// cap full of streams stuck on the engine. Before the stall suspicion the
// streams among them were refused (stream_deadline) and the plain calls
// timed out in the queue (queue_timeout), 503s a client that does not
// retry loses. Now the engine is suspected within about a second and
// nothing new goes to it: with a peer the calls are answered by the peer
// at once; without one they wait in the queue, refused by no bound, and
// the restarted engine answers them.
func TestTheHangWindowLosesNoCall(t *testing.T) {
	t.Parallel()
	long := strings.Replace(moveStream, `"max_tokens":200`, `"max_tokens":1500`, 1)
	for _, withPeer := range []bool{false, true} {
		name := "no peer: held, then answered by the restarted engine"
		if withPeer {
			name = "a peer: answered by its vigil"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			re := newRestartableEngine(t, 0)
			cfg := testConfig()
			cfg.MaxInFlight = 4
			// The bound of a call that arrives at the hang outlasts the
			// suspicion's latest (2.5 s, asserted below), as it must for
			// the suspicion to hold it. A wait that reaches its bound
			// before the suspicion goes on only while nothing progressed
			// since it queued, and under -race on a loaded machine the
			// bytes the engine sent before the hang may reach vigil
			// after a call queued at it: a stream's first-token bound
			// (under a second) then refused it, queue_timeout, in 1 to 7
			// of 24 runs.
			cfg.MaxQueueWait, cfg.StreamQueueWait = 3*time.Second, 3*time.Second
			cfg.SlowStart = 4 * time.Second // after the restart: held while the cap ramps, not refused
			var opts []Option
			var peer proxy
			if withPeer {
				pe := newRestartableEngine(t, 0)
				pcfg := testConfig()
				pcfg.MaxInFlight = 16
				peer = startProxy(t, pcfg, pe.url)
				opts = append(opts, WithPeers(func() []Peer { return []Peer{{Node: "node2", URL: peer.url}} }), WithNode("node1"))
			}
			p := startProxy(t, cfg, re.url, opts...)
			c := newClient(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			// The cap full of long streams under way.
			var wg sync.WaitGroup
			var mu sync.Mutex
			var got []streamed
			run := func(path, body string) {
				defer wg.Done()
				s := readCall(ctx, c, p.url, path, body)
				mu.Lock()
				got = append(got, s)
				mu.Unlock()
			}
			for range cfg.MaxInFlight {
				wg.Add(1)
				go run(pathCompletions, long)
			}
			eventually(t, 5*time.Second, "the streams under way", func() bool {
				return p.l.Stats().InFlight == cfg.MaxInFlight && re.cur.Load().Stats().GenerationTokens > 40
			})
			re.cur.Load().Hang()
			hung := time.Now()
			// Calls arriving during the hang, before any verdict.
			for i := range 6 {
				wg.Add(1)
				if i%2 == 0 {
					go run(pathCompletions, moveStream)
				} else {
					go run(pathCompletions, moveUnary)
				}
				time.Sleep(50 * time.Millisecond)
			}
			eventually(t, 3*time.Second, "the stall suspected", p.l.Suspected)
			d := time.Since(hung)
			if d > 2500*time.Millisecond {
				t.Errorf("suspected %v after the hang, want within about a second", d)
			}
			t.Logf("suspected %v after the hang", d)
			time.Sleep(time.Until(hung.Add(4 * time.Second))) // the verdict comes later, past every bound
			p.l.SetRecovering(true)
			if withPeer {
				// The peer runs the streams cut: their slots here are free
				// for the restarted engine's slow start.
				eventually(t, 3*time.Second, "the slots of the calls moved given back", func() bool {
					return p.l.Stats().InFlight == 0
				})
			}
			time.Sleep(100 * time.Millisecond)
			re.restart(t)
			p.l.SetRecovering(false)
			p.l.SlowStart() // as the recovery does once the engine serves
			wg.Wait()

			for i, g := range got {
				if g.Err != nil || g.status != http.StatusOK || g.ErrorCode != "" || !g.Whole() {
					t.Errorf("call %d: status %d %s after %v, error %v %q, whole %v; want every call answered whole",
						i, g.status, g.refusal, g.took, g.Err, g.ErrorCode, g.Whole())
				}
			}
			s := p.l.Stats()
			fate, _ := p.l.RequestFate()
			if fate.LostTotal() != 0 || len(s.HeldRefused) != 0 {
				t.Errorf("fate %+v, refused while held %v; want none lost", fate, s.HeldRefused)
			}
			if s.Suspicions != 1 || s.FalseSuspicions != 0 {
				t.Errorf("suspicions %d (false %d), want one true", s.Suspicions, s.FalseSuspicions)
			}
			// The window's moments: opened by the suspicion, before the
			// verdict; nothing sent to the engine after the hang (the cap
			// was full of its streams, and the suspicion stopped the rest).
			if fate.Opened.IsZero() || !fate.Opened.Before(fate.Verdict) || !fate.Ended.After(fate.Verdict) ||
				fate.LastSent.After(hung) || fate.LastSent.IsZero() {
				t.Errorf("opened %s, verdict %s, last sent %s, ended %s after the hang; want opened before the verdict, the last call sent before the hang, ended after the verdict",
					fate.Opened.Sub(hung), fate.Verdict.Sub(hung), fate.LastSent.Sub(hung), fate.Ended.Sub(hung))
			}
			if (fate.Held > 0) != (fate.HeldWaitMax > 0) {
				t.Errorf("held %d, longest held wait %v: want a wait exactly when calls were held", fate.Held, fate.HeldWaitMax)
			}
			if s.LastHang == nil || s.LastHang.Verdict != fate.Verdict {
				t.Errorf("Stats().LastHang %+v, want the window's fate", s.LastHang)
			}
			if withPeer {
				if s.Diverted != 6 || fate.MovedTo["node2"] != 10 {
					t.Errorf("diverted %d, moved %v; want the 6 new calls and the 4 streams cut at node2", s.Diverted, fate.MovedTo)
				}
			} else if fate.Queued != 6 || fate.WaitMax < cfg.MaxQueueWait {
				t.Errorf("queued %d, longest wait %v; want the 6 new calls held about 4 s, past their bound", fate.Queued, fate.WaitMax)
			}
		})
	}
}

// A lone long prefill, then a saturated engine (more calls than it runs,
// its own queue filling), raise no suspicion: nothing is held or
// diverted for one, and the calls are admitted as without it.
func TestNoSuspicionOnABusyEngine(t *testing.T) {
	t.Parallel()
	re := newRestartableEngine(t, 4)
	cfg := testConfig()
	cfg.MaxInFlight = 8 // twice what the engine runs: its own queue fills
	cfg.MaxQueueWait = 10 * time.Second
	p := startProxy(t, cfg, re.url)
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prefill := strings.Replace(moveStream, "Tell me a story.", strings.Repeat("word ", 20000), 1)
	if s := readCall(ctx, c, p.url, pathCompletions, prefill); s.status != http.StatusOK || !s.Whole() {
		t.Fatalf("the long prefill: %+v", s)
	}
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := moveStream
			if i%2 == 1 {
				body = moveUnary
			}
			readCall(ctx, c, p.url, pathCompletions, body)
		}()
	}
	wg.Wait()
	// Held waits are not judged: a wait that reaches its bound while the
	// engine sent nothing since it queued is deferred and counted there
	// (core's expire), and under -race on a loaded machine this
	// in-process engine does go quiet that long now and then (3 of 24
	// in one run in about three). A suspicion would hold them.
	if s := p.l.Stats(); s.Suspicions != 0 || s.Diverted != 0 || len(s.HeldRefused) != 0 {
		t.Errorf("suspicions %d, diverted %d, refused while held %v; want none on an engine that never stopped",
			s.Suspicions, s.Diverted, s.HeldRefused)
	}
}

// A stall that passes before any verdict: the suspicion refuses no call,
// tells the hook (the load balancer's soft drain) on and off, is counted
// false at the engine's first byte, and restarts nothing. With a peer it
// costs a move: the calls meanwhile go to the peer. With none it holds
// nothing either: they go to the engine as without a suspicion (the cap
// alone queues one), and the engine answers them once it steps again.
func TestAFalseSuspicionIsReversedAndCounted(t *testing.T) {
	t.Parallel()
	for _, withPeer := range []bool{false, true} {
		name := "no peer: nothing held"
		if withPeer {
			name = "a peer: the calls meanwhile moved"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			re := newRestartableEngine(t, 0)
			cfg := testConfig()
			cfg.MaxInFlight = 4
			// The call the cap queues waits for a long stream to end,
			// 1.5 s or more: past a stream's first-token bound (under a
			// second), which runs again from the suspicion's end, and
			// under -race on a loaded machine the streams run slower
			// still (queue_timeout in 3 of 12 runs).
			cfg.MaxQueueWait, cfg.StreamQueueWait = 10*time.Second, 10*time.Second
			var mu sync.Mutex
			var hook []bool
			opts := []Option{WithSuspicionHook(func(on bool) {
				mu.Lock()
				hook = append(hook, on)
				mu.Unlock()
			})}
			if withPeer {
				peer := startProxy(t, testConfig(), newRestartableEngine(t, 0).url)
				opts = append(opts, WithNode("node1"), WithPeers(func() []Peer { return []Peer{{Node: "node2", URL: peer.url}} }))
			}
			p := startProxy(t, cfg, re.url, opts...)
			c := newClient(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			long := strings.Replace(moveStream, `"max_tokens":200`, `"max_tokens":600`, 1)
			var wg sync.WaitGroup
			var bad sync.Map
			run := func(i int, body string) {
				defer wg.Done()
				if s := readCall(ctx, c, p.url, pathCompletions, body); s.status != http.StatusOK || !s.Whole() {
					bad.Store(i, s)
				}
			}
			for i := range 2 { // two slots of four
				wg.Add(1)
				go run(i, long)
			}
			eventually(t, 5*time.Second, "the streams under way", func() bool { return re.cur.Load().Stats().GenerationTokens > 20 })
			e := re.cur.Load()
			e.Hang()
			eventually(t, 3*time.Second, "the stall suspected", p.l.Suspected)
			for i := range 3 {
				wg.Add(1)
				go run(10+i, moveStream)
			}
			time.Sleep(300 * time.Millisecond)
			st := p.l.Stats()
			switch {
			case withPeer && (st.InFlight != 2 || st.QueueDepth != 0 || st.Diverted != 3):
				t.Errorf("in flight %d, queued %d, diverted %d; want the 3 new calls at the peer, none sent to the suspected engine",
					st.InFlight, st.QueueDepth, st.Diverted)
			case !withPeer && (st.InFlight != 4 || st.QueueDepth != 1):
				t.Errorf("in flight %d, queued %d; want the cap's two free slots taken and one call queued, as without a suspicion",
					st.InFlight, st.QueueDepth)
			}
			e.Clear() // the stall passes before any verdict
			eventually(t, 3*time.Second, "the suspicion cleared", func() bool { return !p.l.Suspected() })
			wg.Wait()
			bad.Range(func(k, v any) bool { t.Errorf("call %v: %+v", k, v); return true })
			s := p.l.Stats()
			if s.Suspicions != 1 || s.FalseSuspicions != 1 || len(s.HeldRefused) != 0 || s.Recovering {
				t.Errorf("suspicions %d, false %d, refused while held %v; want one false suspicion, nothing refused",
					s.Suspicions, s.FalseSuspicions, s.HeldRefused)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(hook) != 2 || !hook[0] || hook[1] {
				t.Errorf("hook told %v, want on then off", hook)
			}
		})
	}
}

// A call for a suspected engine goes to the first peer that takes it: a
// peer that refuses (503) is passed over for the next.
func TestAHeldEnginesCallTriesEachPeer(t *testing.T) {
	t.Parallel()
	re := newRestartableEngine(t, 0)
	full := newFakeEngine(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	pe := newRestartableEngine(t, 0)
	peer := startProxy(t, testConfig(), pe.url)
	p := startProxy(t, testConfig(), re.url, WithNode("node1"), WithPeers(func() []Peer {
		return []Peer{{Node: "node2", URL: full.srv.URL}, {Node: "node3", URL: peer.url}}
	}))
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	long := strings.Replace(moveStream, `"max_tokens":200`, `"max_tokens":2000`, 1)
	go readCall(ctx, c, p.url, pathCompletions, long)
	eventually(t, 5*time.Second, "the stream under way", func() bool { return re.cur.Load().Stats().GenerationTokens > 20 })
	re.cur.Load().Hang()
	eventually(t, 3*time.Second, "the stall suspected", p.l.Suspected)
	s := readCall(ctx, c, p.url, pathCompletions, moveUnary)
	if s.status != http.StatusOK || full.calls.Load() != 1 {
		t.Fatalf("status %d, the full peer asked %d times; want 200 from node3 after node2 refused", s.status, full.calls.Load())
	}
	if fate, _ := p.l.RequestFate(); fate.MovedTo["node3"] != 1 || fate.MovedTo["node2"] != 0 {
		t.Fatalf("moved %v, want the call at node3", fate.MovedTo)
	}
}

// A call cut at the verdict is offered to each peer in turn: a peer that
// refuses is passed over for the next, and costs none of max_moves.
func TestACutCallTriesEachPeer(t *testing.T) {
	t.Parallel()
	want := uninterrupted(t, pathCompletions, moveStream)
	re := newRestartableEngine(t, 0)
	full := newFakeEngine(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	pe := newRestartableEngine(t, 0)
	peer := startProxy(t, testConfig(), pe.url)
	cfg := testConfig()
	cfg.MaxMoves = 1
	p := startProxy(t, cfg, re.url, WithNode("node1"), WithPeers(func() []Peer {
		return []Peer{{Node: "node2", URL: full.srv.URL}, {Node: "node3", URL: peer.url}}
	}))
	ch := make(chan streamed, 1)
	go func() { ch <- readCall(context.Background(), newClient(t), p.url, pathCompletions, moveStream) }()
	eventually(t, 5*time.Second, "the stream under way", func() bool { return re.cur.Load().Stats().GenerationTokens > 5 })
	re.cur.Load().Hang()
	p.l.SetRecovering(true)
	s := <-ch
	if s.status != http.StatusOK || !s.Whole() || s.Text != want.Text || full.calls.Load() != 1 {
		t.Fatalf("got %+v (node2 asked %d times); want the whole stream, continued at node3 after node2 refused", s, full.calls.Load())
	}
	if fate, _ := p.l.RequestFate(); fate.MovedTo["node3"] != 1 || fate.LostTotal() != 0 {
		t.Fatalf("fate %+v, want the stream moved to node3, none lost", fate)
	}
}

// A peer at its own cap, none of its own calls waiting, takes the calls
// cut at the verdict into its queue and answers them after its own: none
// waits for the restart (the hung engine is never restarted here), and the
// peer's own calls are all answered. Before, a moved call waited at most
// 2 s at the peer, was refused back and held at home for the restart.
func TestAPeerAtItsCapQueuesTheCallsCutAtTheVerdict(t *testing.T) {
	t.Parallel()
	re := newRestartableEngine(t, 0)
	pe := newRestartableEngine(t, 0)
	pcfg := testConfig()
	pcfg.MaxInFlight = 2
	pcfg.MaxQueueWait = 20 * time.Second
	peer := startProxy(t, pcfg, pe.url)
	p := startProxy(t, testConfig(), re.url, WithNode("node1"), WithPeers(func() []Peer {
		return []Peer{{Node: "node2", URL: peer.url}}
	}))
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var home, own []streamed
	run := func(url, body string, into *[]streamed) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := readCall(ctx, c, url, pathCompletions, body)
			mu.Lock()
			*into = append(*into, s)
			mu.Unlock()
		}()
	}
	// The peer's cap full of its own long streams (about 3 s each).
	long := strings.Replace(moveStream, `"max_tokens":200`, `"max_tokens":1200`, 1)
	for range pcfg.MaxInFlight {
		run(peer.url, long, &own)
	}
	// Home's cap full of streams under way, then the engine hangs and the
	// verdict comes at once.
	for range 4 {
		run(p.url, moveStream, &home)
	}
	eventually(t, 5*time.Second, "both caps full, the streams under way", func() bool {
		return p.l.Stats().InFlight == 4 && peer.l.Stats().InFlight == 2 && re.cur.Load().Stats().GenerationTokens > 40
	})
	re.cur.Load().Hang()
	p.l.SetRecovering(true)
	eventually(t, 3*time.Second, "the calls cut queued at the peer", func() bool { return peer.l.Stats().QueueDepth == 4 })
	run(peer.url, moveUnary, &own) // the peer's own arrival meanwhile goes first
	wg.Wait()

	for i, g := range append(home, own...) {
		if g.Err != nil || g.status != http.StatusOK || g.ErrorCode != "" || !g.Whole() {
			t.Errorf("call %d: status %d, error %v %q, whole %v; want every call answered whole", i, g.status, g.Err, g.ErrorCode, g.Whole())
		}
	}
	fate, held := p.l.RequestFate()
	if fate.MovedTo["node2"] != 4 || fate.Held != 0 || held != 0 || fate.LostTotal() != 0 {
		t.Errorf("fate %+v, held now %d; want the 4 streams moved to node2, none held for the restart", fate, held)
	}
}
