package admission

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/testinfra"
)

// simEngine runs the simulated vLLM behind an httptest server.
func simEngine(t testing.TB, seqs int, scale float64) (*enginesim.Engine, string) {
	cfg := enginesim.DefaultConfig()
	cfg.APIKey = engineKey
	cfg.MaxNumSeqs = seqs
	cfg.Scale = scale
	e := enginesim.New(cfg)
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(func() { srv.Close(); e.Close() })
	return e, srv.URL
}

const simStreamBody = `{"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":"x","max_tokens":8,"stream":true,` +
	`"vigil_sim":{"prompt_tokens":200,"output_tokens":8}}`

// loadResult is what closed-loop clients saw over a measured stretch.
type loadResult struct {
	completed int64           // 200 answers read to [DONE] within the window
	shed      int64           // 429 and 503
	ttfts     []time.Duration // client-side time to first event of the completed ones
}

// closedLoop runs n clients, each streaming call after call (pausing for
// backoff after a rejection), for warm + measure; it counts the measure
// part only.
func closedLoop(t testing.TB, base string, n int, backoff, warm, measure time.Duration, during func()) loadResult {
	t.Helper()
	c := newClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	from, until := start.Add(warm), start.Add(warm+measure)
	var res loadResult
	var mu sync.Mutex
	var completed, shed atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(until) {
				sent := time.Now()
				resp, err := post(ctx, c, base, simStreamBody)
				if err != nil {
					return
				}
				if resp.StatusCode != http.StatusOK {
					resp.Body.Close()
					if sent.After(from) {
						shed.Add(1)
					}
					time.Sleep(backoff)
					continue
				}
				br := bufio.NewReader(resp.Body)
				var ttft time.Duration
				done := false
				for {
					line, err := br.ReadString('\n')
					if ttft == 0 && strings.HasPrefix(line, "data:") {
						ttft = time.Since(sent)
					}
					if strings.HasPrefix(line, "data: [DONE]") {
						done = true
					}
					if err != nil {
						break
					}
				}
				resp.Body.Close()
				if now := time.Now(); done && sent.After(from) && now.Before(until) {
					completed.Add(1)
					mu.Lock()
					res.ttfts = append(res.ttfts, ttft)
					mu.Unlock()
				}
			}
		}()
	}
	if during != nil {
		during()
	}
	wg.Wait()
	res.completed, res.shed = completed.Load(), shed.Load()
	return res
}

func TestWithTheSimulatedEngineTheCapHolds(t *testing.T) {
	eng, url := simEngine(t, 256, 2)
	cfg := testConfig()
	cfg.MaxInFlight = 8
	cfg.MaxQueue = 16
	p := startProxy(t, cfg, url)
	var worst atomic.Int64
	res := closedLoop(t, p.url, 48, 20*time.Millisecond, 0, 700*time.Millisecond, func() {
		for deadline := time.Now().Add(700 * time.Millisecond); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			s := eng.Stats()
			if n := int64(s.Running + s.Waiting + s.Pending); n > worst.Load() {
				worst.Store(n)
			}
		}
	})
	s := eng.Stats()
	t.Logf("engine: max running %d, worst running+waiting+pending %d, completed %d; clients: %d completed, %d shed",
		s.MaxRunning, worst.Load(), s.Completed, res.completed, res.shed)
	if s.MaxRunning > 8 || worst.Load() > 8 {
		t.Errorf("the engine held %d running (%d with its queues) over the cap of 8", s.MaxRunning, worst.Load())
	}
	if res.completed == 0 {
		t.Error("nothing completed")
	}
}

// simRun serves the simulated engine (batch seqs) through a limiter with
// the given cap (0: automatic) under closed-loop overload, and reports the
// clients' results, the engine's mean waiting queue and the mean cap over
// the measured stretch, and the cap and the first-token limit every 200 ms.
type simRun struct {
	res                    loadResult
	engineWaiting, meanCap float64
	caps, firstTokenLimits []int
	lastStats              Stats
}

func runSim(t *testing.T, seqs, clients, maxInFlight int, target time.Duration, warm, measure time.Duration) simRun {
	return runSimAfter(t, seqs, clients, maxInFlight, target, warm, measure, nil)
}

// runSimAfter is runSim with before (when not nil) run against the proxy
// first: what the limiter saw before the load.
func runSimAfter(t *testing.T, seqs, clients, maxInFlight int, target time.Duration, warm, measure time.Duration,
	before func(proxyURL string)) simRun {
	eng, url := simEngine(t, seqs, 1)
	cfg := testConfig()
	cfg.MaxInFlight = maxInFlight
	cfg.TTFTTarget = configs.Fixed(target)
	cfg.MaxQueue = 64
	cfg.MaxQueueWait = time.Second
	p := startProxy(t, cfg, url)
	if before != nil {
		before(p.url)
	}
	var run simRun
	var waitingSum, capSum, samples float64
	run.res = closedLoop(t, p.url, clients, 200*time.Millisecond, warm, measure, func() {
		start := time.Now()
		for i := 0; time.Since(start) < warm+measure; i++ {
			time.Sleep(20 * time.Millisecond)
			st := p.l.Stats()
			c := st.Cap
			if i%10 == 0 {
				run.caps = append(run.caps, c)
				run.firstTokenLimits = append(run.firstTokenLimits, st.FirstTokenLimit)
			}
			if time.Since(start) > warm {
				waitingSum += float64(eng.Stats().Waiting)
				capSum += float64(c)
				samples++
			}
		}
	})
	run.lastStats = p.l.Stats()
	p.stop()
	run.engineWaiting, run.meanCap = waitingSum/samples, capSum/samples
	return run
}

func within(r loadResult, slo time.Duration) int {
	n := 0
	for _, d := range r.ttfts {
		if d <= slo {
			n++
		}
	}
	return n
}

// TestTheAutomaticCapFindsTheEnginesBatch runs the simulated engine, whose
// batch (max_num_seqs 40) the limiter is not told, under 3x overload: the
// automatic cap must settle near the batch, keep the engine's own queue
// below the watchdog's saturation threshold (8 waiting), and complete at
// least 85% of what a cap fixed at the batch size completes. It compares
// rates over 2 s of wall time, so it runs alone (testinfra.Alone): beside
// the race-detected suite the cap once never left its start.
func TestTheAutomaticCapFindsTheEnginesBatch(t *testing.T) {
	testinfra.Alone(t)
	testinfra.Long(t, "runs the simulated engine for a few seconds")
	const batch, clients = 40, 120
	fixed := runSim(t, batch, clients, batch, 0, 2*time.Second, 2500*time.Millisecond)
	auto := runSim(t, batch, clients, 0, 0, 2*time.Second, 2500*time.Millisecond)
	for _, r := range []struct {
		name string
		run  simRun
	}{{"fixed cap 40", fixed}, {"automatic cap", auto}} {
		t.Logf("%s: %d completed, %d within 500 ms TTFT, engine waiting %.1f on average, cap %.1f on average; cap every 200 ms: %v",
			r.name, r.run.res.completed, within(r.run.res, 500*time.Millisecond), r.run.engineWaiting, r.run.meanCap, r.run.caps)
	}
	if auto.meanCap < 0.75*batch || auto.meanCap > 1.25*batch {
		t.Errorf("the automatic cap settled at %.1f, want near the engine's batch of %d", auto.meanCap, batch)
	}
	if s := auto.lastStats; s.EngineRunning < 0 {
		t.Error("the automatic cap never read the engine's queue gauges")
	}
	if auto.engineWaiting > 8 {
		t.Errorf("the engine's own queue averaged %.1f, over the saturation threshold of 8", auto.engineWaiting)
	}
	if float64(auto.res.completed) < 0.85*float64(fixed.res.completed) {
		t.Errorf("the automatic cap completed %d, under 85%% of the fixed cap's %d", auto.res.completed, fixed.res.completed)
	}
}

// TestATTFTObjectiveHoldsFirstTokensNearIt gives the automatic cap an
// objective tighter than the TTFT of a full batch when requests arrive in
// waves (a wave of 40 prefills takes ~260 ms here): the first-token limit
// (streams awaiting their first token at once) must hold the first tokens
// near the objective, the cap stay near the engine's batch, and nearly as
// much complete as with a cap fixed at the batch.
func TestATTFTObjectiveHoldsFirstTokensNearIt(t *testing.T) {
	testinfra.Alone(t)
	testinfra.Long(t, "runs the simulated engine for a few seconds")
	const batch, target = 40, 150 * time.Millisecond
	fixed := runSim(t, batch, 120, batch, target, 2*time.Second, 2*time.Second)
	run := runSim(t, batch, 120, 0, target, 2*time.Second, 2*time.Second)
	ttfts := slices.Clone(run.res.ttfts)
	slices.Sort(ttfts)
	var p50 time.Duration
	if len(ttfts) > 0 {
		p50 = ttfts[len(ttfts)/2]
	}
	t.Logf("objective %v: cap %.1f on average, %d completed, client TTFT p50 %v (queue wait included); cap every 200 ms: %v; first-token limit: %v",
		target, run.meanCap, run.res.completed, p50, run.caps, run.firstTokenLimits)
	if run.meanCap > 1.25*batch || run.meanCap < 8 {
		t.Errorf("cap %.1f on average, want it between 8 and 1.25x the batch of %d", run.meanCap, batch)
	}
	if run.res.completed == 0 || p50 > target*3/2 {
		t.Errorf("client TTFT p50 %v, want within 1.5x the objective %v (queue wait included)", p50, target)
	}
	if slices.Max(run.firstTokenLimits) == 0 {
		t.Error("no first-token limit with an objective")
	}
	// Holding prompts that share an engine step to one at a time costs
	// throughput for nothing (it once held 1 here: 68 completed).
	if float64(run.res.completed) < 0.8*float64(fixed.res.completed) {
		t.Errorf("%d completed, under 80%% of the %d of a fixed cap at the batch", run.res.completed, fixed.res.completed)
	}
}

// simTinyBody is a request as small as the engine serves: one prompt
// token, one output token, a single engine step.
const simTinyBody = `{"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":"x","max_tokens":1,` +
	`"vigil_sim":{"prompt_tokens":1,"output_tokens":1}}`

// tinyBurst sends n tiny plain calls through the proxy from 16 clients,
// a quarter of them with a body the client sends slowly, and fails the test
// unless they all succeed.
func tinyBurst(t *testing.T, n int) func(proxyURL string) {
	return func(base string) {
		c := newClient(t)
		var next, failed atomic.Int64
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					var a answer
					if w%4 == 0 {
						a = callSlowBody(c, base, simTinyBody, 3, 20*time.Millisecond)
					} else {
						a = call(context.Background(), c, base, simTinyBody)
					}
					if a.err != nil || a.status != http.StatusOK {
						failed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if f := failed.Load(); f > 0 {
			t.Fatalf("%d of %d tiny calls failed", f, n)
		}
	}
}

// callSlowBody posts body in parts pieces, pausing gap before each: a
// client that sends its body slowly.
func callSlowBody(c *http.Client, base, body string, parts int, gap time.Duration) answer {
	pr, pw := io.Pipe()
	go func() {
		step := (len(body) + parts - 1) / parts
		for i := 0; i < len(body); i += step {
			time.Sleep(gap)
			if _, err := io.WriteString(pw, body[i:min(len(body), i+step)]); err != nil {
				return
			}
		}
		pw.Close()
	}()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/completions", pr)
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
}

// TestTinyCallsFirstDoNotPoisonTheAutomaticCap is issue 16's row: a burst
// of tiny calls (one output token, some with a slowly sent body) before
// the real load must not hold the automatic cap below the engine's batch.
// The control run, the same load without the burst, shows where the cap
// belongs; after the burst it must get there within the same warm-up.
func TestTinyCallsFirstDoNotPoisonTheAutomaticCap(t *testing.T) {
	testinfra.Long(t, "runs the simulated engine for a few seconds")
	const batch, clients = 40, 120
	control := runSim(t, batch, clients, 0, 0, 2*time.Second, 2*time.Second)
	burst := runSimAfter(t, batch, clients, 0, 0, 2*time.Second, 2*time.Second, tinyBurst(t, 300))
	for _, r := range []struct {
		name string
		run  simRun
	}{{"control, no burst", control}, {"after 300 tiny calls", burst}} {
		t.Logf("%s: %d completed, cap %.1f on average, engine waiting %.1f; cap every 200 ms: %v",
			r.name, r.run.res.completed, r.run.meanCap, r.run.engineWaiting, r.run.caps)
		if r.run.meanCap < 0.75*batch || r.run.meanCap > 1.25*batch {
			t.Errorf("%s: the automatic cap averaged %.1f, want near the engine's batch of %d", r.name, r.run.meanCap, batch)
		}
	}
	// The cap is the claim; the completed count backs it loosely: the two
	// runs follow each other on a shared machine, and under the parallel
	// packages of CI one of them may get less CPU (seen: 145 vs 181 with
	// the cap at 41 in both). A poisoned cap completed about a quarter
	// (36 vs 154 when this row was found).
	if float64(burst.res.completed) < 0.7*float64(control.res.completed) {
		t.Errorf("after the burst %d calls completed, under 70%% of the control's %d", burst.res.completed, control.res.completed)
	}
}
