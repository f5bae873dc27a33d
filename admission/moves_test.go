package admission

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/admission/engineloss"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/simclient"
)

// restartableEngine is a simulated engine behind one address that can be
// hung and then "restarted": a fresh engine takes the address, as a
// container restarted on the same port does. Its text is deterministic, so
// the restarted engine continues a stream exactly.
type restartableEngine struct {
	cur  atomic.Pointer[enginesim.Engine]
	url  string
	seqs int
}

// newRestartableEngine runs seqs sequences at once (0: the default).
func newRestartableEngine(t *testing.T, seqs int) *restartableEngine {
	t.Helper()
	re := &restartableEngine{seqs: seqs}
	re.restart(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		re.cur.Load().Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	re.url = srv.URL
	return re
}

func (re *restartableEngine) restart(t *testing.T) {
	cfg := enginesim.DefaultConfig()
	cfg.APIKey = engineKey
	cfg.Scale = 4 // 2.5 ms a token: a 200-token stream lasts half a second
	if re.seqs > 0 {
		cfg.MaxNumSeqs = re.seqs
	}
	e := enginesim.New(cfg)
	t.Cleanup(e.Close)
	re.cur.Store(e)
}

// streamed is what a client read of one call: its status, and a 200's
// answer.
type streamed struct {
	status  int
	refusal string // a refusal's body
	took    time.Duration
	simclient.Answer
}

// startLongStream sends a 1,500-token stream through the proxy at base
// and returns once re's engine is generating it; done waits for its end,
// which must be whole.
func startLongStream(ctx context.Context, t *testing.T, c *http.Client, base string, re *restartableEngine) (done func()) {
	t.Helper()
	long := strings.Replace(moveStream, `"max_tokens":200`, `"max_tokens":1500`, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if s := readCall(ctx, c, base, pathCompletions, long); s.status != http.StatusOK || !s.Whole() {
			t.Errorf("the stream: %+v", s)
		}
	}()
	eventually(t, 5*time.Second, "the stream under way", func() bool { return re.cur.Load().Stats().GenerationTokens > 20 })
	return wg.Wait
}

func readCall(ctx context.Context, c *http.Client, base, path, body string, hdr ...string) streamed {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return streamed{Answer: simclient.Answer{Err: err}}
	}
	defer resp.Body.Close()
	s := streamed{status: resp.StatusCode, took: time.Since(start)}
	if resp.StatusCode == http.StatusOK {
		s.Answer = simclient.ReadAnswer(resp)
	} else {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		s.refusal = string(b)
	}
	return s
}

const (
	moveStream = `{"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":"Tell me a story.","max_tokens":200,"stream":true}`
	moveChat   = `{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":200,"stream":true}`
	moveUnary  = `{"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":"Tell me a story.","max_tokens":200}`
	moveTwo    = `{"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":"Tell me a story.","max_tokens":200,"n":2,"stream":true}`
)

// uninterrupted is what a call reads from an engine that never hangs.
func uninterrupted(t *testing.T, path, body string) streamed {
	t.Helper()
	re := newRestartableEngine(t, 0)
	s := readCall(context.Background(), newClient(t), re.url, path, body, "Authorization", "Bearer "+engineKey)
	if !s.Whole() || s.status != http.StatusOK {
		t.Fatalf("uninterrupted %s: %+v", path, s)
	}
	return s
}

// The calls in flight on an engine that hangs are moved, held or
// continued, each in the state the verdict finds it in, with a pool peer
// and without one: every client gets the answer the engine would have
// given, and none is lost.
func TestCallsCutByAHungEngineAreMovedNotLost(t *testing.T) {
	t.Parallel()
	wantStream, wantChat, wantUnary := uninterrupted(t, pathCompletions, moveStream),
		uninterrupted(t, pathChat, moveChat), uninterrupted(t, pathCompletions, moveUnary)

	type call struct {
		name, path, body string
		hdr              []string
		want             streamed
		// started: wait for this much text before the hang (a stream under
		// way); else the call is in the engine with no byte sent.
		started bool
		// queued: sent after the hang, while vigil's queue holds it.
		queued bool
	}
	calls := []call{
		{name: "a stream under way", path: pathCompletions, body: moveStream, want: wantStream, started: true},
		{name: "a chat stream under way", path: pathChat, body: moveChat, want: wantChat, started: true},
		{name: "a keyed call with two listeners", path: pathChat, body: moveChat, hdr: []string{"Idempotency-Key", "k1"},
			want: wantChat, started: true},
		{name: "a unary call with no byte sent", path: pathCompletions, body: moveUnary, want: wantUnary},
		{name: "a stream with no byte sent", path: pathCompletions, body: strings.Replace(moveStream, "story", "tale", 1),
			want: uninterrupted(t, pathCompletions, strings.Replace(moveStream, "story", "tale", 1))},
		{name: "a queued call", path: pathCompletions, body: moveUnary, want: wantUnary, queued: true},
	}
	for _, withPeer := range []bool{false, true} {
		name := "no peer: held for the restarted engine"
		if withPeer {
			name = "a peer: moved to its vigil"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// The engine runs 4 sequences: the fifth call sent waits in its
			// own queue, a stream with no byte sent.
			re := newRestartableEngine(t, 4)
			cfg := testConfig()
			cfg.MaxInFlight = 5
			cfg.MaxQueueWait = 2 * time.Minute // longer than a first recovery is expected to take
			var opts []Option
			var peerEngine *enginesim.Engine
			if withPeer {
				pe := newRestartableEngine(t, 0)
				peerEngine = pe.cur.Load()
				pcfg := testConfig()
				pcfg.MaxInFlight = 16 // room for every call moved: none is refused
				peer := startProxy(t, pcfg, pe.url)
				opts = append(opts, WithPeers(func() []Peer { return []Peer{{Node: "node2", URL: peer.url}} }), WithNode("node1"))
			}
			p := startProxy(t, cfg, re.url, opts...)
			c := newClient(t)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()

			got := make([]streamed, len(calls)+1)
			var wg sync.WaitGroup
			run := func(i int, cl call) {
				defer wg.Done()
				got[i] = readCall(ctx, c, p.url, cl.path, cl.body, cl.hdr...)
			}
			// In order: the streams under way, the unary call, the stream
			// that waits in the engine's queue, the call in vigil's queue.
			for i, cl := range calls {
				if !cl.started {
					// Every call before it is in the engine's batch, not
					// only admitted by vigil.
					eventually(t, 5*time.Second, "the calls before "+cl.name, func() bool {
						return p.l.Stats().InFlight == i && re.cur.Load().Stats().Running == min(i, re.seqs)
					})
				}
				wg.Add(1)
				go run(i, cl)
			}
			eventually(t, 5*time.Second, "a call queued", func() bool { return p.l.Stats().QueueDepth == 1 })
			// The keyed call's second listener: its client's retry attaches.
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[len(calls)] = readCall(ctx, c, p.url, calls[2].path, calls[2].body, calls[2].hdr...)
			}()
			eventually(t, 5*time.Second, "the retry attached", func() bool { return p.l.Stats().CoalescedAttached == 1 })
			time.Sleep(60 * time.Millisecond) // some tokens out on every stream
			re.cur.Load().Hang()
			p.l.SetRecovering(true)
			eventually(t, 5*time.Second, "the calls cut wait for an engine", func() bool {
				_, held := p.l.RequestFate()
				return withPeer || held == cfg.MaxInFlight
			})
			// With a peer the queued call goes there too, answered sooner
			// than by a restart; without one it waits in the queue.
			eventually(t, 5*time.Second, "the queued call placed", func() bool {
				d := p.l.Stats().QueueDepth
				return (withPeer && d == 0) || (!withPeer && d == 1)
			})
			time.Sleep(50 * time.Millisecond)
			re.restart(t)
			p.l.SetRecovering(false)
			wg.Wait()

			for i, cl := range append(calls, calls[2]) {
				g := got[i]
				if g.Err != nil || g.status != http.StatusOK || g.ErrorCode != "" {
					t.Errorf("%s: %+v", cl.name, g)
					continue
				}
				if g.Text != cl.want.Text {
					t.Errorf("%s: text\n %q\nwant the uninterrupted\n %q", cl.name, g.Text, cl.want.Text)
				}
				if !g.Whole() {
					t.Errorf("%s: %d [DONE], ids %v; want one of each", cl.name, g.Dones, g.IDs)
				}
			}
			fate, held := p.l.RequestFate()
			if fate.LostTotal() != 0 || held != 0 {
				t.Errorf("fate %+v, %d still held; want none lost or held", fate, held)
			}
			if withPeer {
				if fate.MovedTo["node2"] != 6 || peerEngine.Stats().Completed == 0 {
					t.Errorf("fate %+v; want the 5 calls in flight and the queued one moved to node2", fate)
				}
				if fate.Continued != 3 {
					t.Errorf("continued %d, want the 3 streams under way", fate.Continued)
				}
			} else if fate.Held != 5 || fate.Continued != 3 {
				t.Errorf("held %d, continued %d; want 5 held, 3 streams continued", fate.Held, fate.Continued)
			}
		})
	}
}

// A stream that cannot be continued exactly ends with an error event the
// SDKs raise, never a bare reset; with moving off (max_moves 0) the calls
// stay on the hung engine, as without vigil.
func TestCallsThatCannotMove(t *testing.T) {
	t.Parallel()
	t.Run("a stream with logprobs ends with an error event that says why", func(t *testing.T) {
		t.Parallel()
		re := newRestartableEngine(t, 0)
		p := startProxy(t, testConfig(), re.url)
		ch := make(chan streamed, 1)
		go func() {
			ch <- readCall(context.Background(), newClient(t), p.url, pathCompletions,
				strings.Replace(moveStream, `"stream":true`, `"stream":true,"logprobs":1`, 1))
		}()
		eventually(t, 5*time.Second, "the stream under way", func() bool { return re.cur.Load().Stats().GenerationTokens > 5 })
		re.cur.Load().Hang()
		p.l.SetRecovering(true)
		s := <-ch
		if s.status != http.StatusOK || s.ErrorCode != "vigil_"+engineloss.LossLogprobs || s.Dones != 0 || s.Err != nil {
			t.Fatalf("got %+v, want the stream ended by an error event %q", s, "vigil_"+engineloss.LossLogprobs)
		}
		if fate, _ := p.l.RequestFate(); fate.Lost[engineloss.LossLogprobs] != 1 {
			t.Fatalf("fate %+v, want one lost for logprobs", fate)
		}
	})
	t.Run("a stored answer is still given while the engine is recovered", func(t *testing.T) {
		t.Parallel()
		re := newRestartableEngine(t, 0)
		p := startProxy(t, testConfig(), re.url)
		c := newClient(t)
		first := readCall(context.Background(), c, p.url, pathCompletions, moveUnary, "Idempotency-Key", "k2")
		re.cur.Load().Hang()
		p.l.SetRecovering(true)
		again := readCall(context.Background(), c, p.url, pathCompletions, moveUnary, "Idempotency-Key", "k2")
		if first.status != http.StatusOK || again.status != http.StatusOK || again.Text != first.Text || p.l.Stats().CoalescedStored != 1 {
			t.Fatalf("first %+v, retry during the recovery %+v; want the stored answer", first, again)
		}
	})
	t.Run("max_moves 0: nothing is cut", func(t *testing.T) {
		t.Parallel()
		re := newRestartableEngine(t, 0)
		cfg := testConfig()
		cfg.MaxMoves = 0
		p := startProxy(t, cfg, re.url)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go readCall(ctx, newClient(t), p.url, pathCompletions, moveUnary)
		eventually(t, 5*time.Second, "the call in flight", func() bool { return p.l.Stats().InFlight == 1 })
		re.cur.Load().Hang()
		p.l.SetRecovering(true)
		time.Sleep(50 * time.Millisecond)
		if fate, held := p.l.RequestFate(); p.l.Stats().InFlight != 1 || held != 0 || fate.Held+fate.Moved()+fate.LostTotal() != 0 {
			t.Fatalf("in flight %d, fate %+v; want the call left on the engine", p.l.Stats().InFlight, fate)
		}
	})
}

// A call cut at the verdict that a peer at its own cap keeps in its
// queue comes home when this node's engine is back, and the restarted
// engine answers it: the peer would have kept it for the whole outage
// this node expects (90 s before one was seen), behind its own clients,
// the call holding a slot here all the while. A call the peer has
// admitted stays there (TestCallsCutByAHungEngineAreMovedNotLost: the
// peer says so, and its plain answers are not called back).
func TestACallAPeerKeepsComesHomeWhenTheEngineIsBack(t *testing.T) {
	t.Parallel()
	re := newRestartableEngine(t, 0)
	pe := newRestartableEngine(t, 0)
	pcfg := testConfig()
	pcfg.MaxInFlight = 1 // its cap taken by its own client's long stream
	pcfg.MaxQueueWait = time.Minute
	peer := startProxy(t, pcfg, pe.url)
	cfg := testConfig()
	cfg.MaxQueueWait = time.Minute
	p := startProxy(t, cfg, re.url, WithPeers(func() []Peer { return []Peer{{Node: "node2", URL: peer.url}} }), WithNode("node1"))
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	own := strings.Replace(moveStream, `"max_tokens":200`, `"max_tokens":20000`, 1) // 50 s
	go readCall(ctx, c, peer.url, pathCompletions, own)
	eventually(t, 5*time.Second, "the peer at its cap", func() bool { return peer.l.Stats().InFlight == 1 })

	done := make(chan streamed, 1)
	go func() { done <- readCall(ctx, c, p.url, pathCompletions, moveUnary) }()
	eventually(t, 5*time.Second, "the call on the engine", func() bool { return re.cur.Load().Stats().Running == 1 })
	re.cur.Load().Hang()
	p.l.SetRecovering(true)
	eventually(t, 5*time.Second, "the call cut and queued at the peer", func() bool { return peer.l.Stats().QueueDepth == 1 })
	re.restart(t)
	back := time.Now()
	p.l.SetRecovering(false)
	var g streamed
	select {
	case g = <-done:
	case <-ctx.Done():
		t.Fatal("the call was not answered: the peer kept it")
	}
	if g.status != http.StatusOK || g.Err != nil || g.Text == "" {
		t.Fatalf("got %+v, want the restarted engine's answer", g)
	}
	if d := time.Since(back); d > 5*time.Second {
		t.Errorf("answered %v after the engine was back, want about one answer's time", d)
	}
	if n := re.cur.Load().Stats().Completed; n != 1 {
		t.Errorf("the restarted engine completed %d, want the call called home", n)
	}
	eventually(t, 5*time.Second, "the peer's queue emptied", func() bool { return peer.l.Stats().QueueDepth == 0 })
	if fate, held := p.l.RequestFate(); fate.LostTotal() != 0 || held != 0 {
		t.Errorf("fate %+v, %d still held; want none lost or held", fate, held)
	}
}
