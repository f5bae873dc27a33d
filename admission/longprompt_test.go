package admission

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/testinfra"
)

// scaledClock is a Clock whose time runs scale times faster than the wall,
// so the limiter keeps its proportion to a time-scaled engine.
type scaledClock struct {
	start time.Time
	scale float64
}

func (c scaledClock) Now() time.Time {
	return c.start.Add(time.Duration(float64(time.Since(c.start)) * c.scale))
}

func (c scaledClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(time.Duration(float64(d)/c.scale), f).Stop
}

// Scale tells the limiter's pause meter to tick on wall time.
func (c scaledClock) Scale() float64 { return c.scale }

// longPromptRun is what an open-loop run of long prompts saw.
type longPromptRun struct {
	caps []int // the cap every engine second
	// firstTokenLimits and awaiting: the first-token limit and the streams
	// awaiting their first token, every engine second.
	firstTokenLimits, awaiting []int
	meanCap                    float64
	maxRunning                 int
	completed                  int
	engineRunning              float64 // mean of the engine's running gauge, second half
}

// runLongPrompts serves Poisson arrivals of streamed 12,000-token prompts
// (a 2,000-token shared prefix, 300-token answers) at load x the engine's
// capacity through the automatic cap, for span of engine time, with the
// engine and the limiter on the same time scale. The engine runs at most
// seqs sequences at once.
func runLongPrompts(t *testing.T, ecfg enginesim.Config, seats int, load float64, span time.Duration, target time.Duration) longPromptRun {
	t.Helper()
	ecfg.APIKey = engineKey
	scale := ecfg.Scale
	work := enginesim.Workload{PromptTokens: 12000, PrefixTokens: 2000, OutputTokens: 300}
	rate := load * enginesim.MeasureCapacity(ecfg, work)
	eng := enginesim.New(ecfg)
	srv := httptest.NewServer(eng.Handler())
	t.Cleanup(func() { srv.Close(); eng.Close() })

	clk := scaledClock{start: time.Now(), scale: scale}
	cfg := testConfig()
	cfg.MaxInFlight = 0
	cfg.TTFTTarget = configs.Fixed(target)
	cfg.EngineMaxSeqs = seats
	cfg.MaxQueue = 4096
	cfg.MaxQueueWait = time.Minute
	p := startProxy(t, cfg, srv.URL, WithClock(clk))

	body := fmt.Sprintf(`{"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":"x","max_tokens":%d,"stream":true,`+
		`"vigil_sim":{"prompt_tokens":%d,"prefix_tokens":%d,"prefix_id":"shared","output_tokens":%d}}`,
		work.OutputTokens, work.PromptTokens, work.PrefixTokens, work.OutputTokens)
	c := newClient(t)
	c.Timeout = 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wall := func(d time.Duration) time.Duration { return time.Duration(float64(d) / scale) }

	var run longPromptRun
	var mu sync.Mutex
	var wg sync.WaitGroup
	rng := rand.New(rand.NewPCG(17, 17))
	start := time.Now()
	wg.Go(func() {
		var sumCap, sumRun, n, nRun float64
		for i := 1; time.Since(start) < wall(span); i++ {
			time.Sleep(time.Until(start.Add(wall(time.Duration(i) * time.Second))))
			s := p.l.Stats()
			es := eng.Stats()
			mu.Lock()
			run.caps = append(run.caps, s.Cap)
			run.firstTokenLimits = append(run.firstTokenLimits, s.FirstTokenLimit)
			run.awaiting = append(run.awaiting, s.AwaitingFirstToken)
			mu.Unlock()
			sumCap += float64(s.Cap)
			n++
			if time.Since(start) > wall(span/2) {
				sumRun += float64(es.Running)
				nRun++
			}
		}
		run.meanCap = sumCap / n
		run.engineRunning = sumRun / max(1, nRun)
	})
	for at := time.Duration(0); ; {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if at >= span {
			break
		}
		time.Sleep(time.Until(start.Add(wall(at))))
		wg.Go(func() {
			// The client gives up at the end of the span: what has not
			// finished by then does not count.
			cctx, ccancel := context.WithDeadline(ctx, start.Add(wall(span)))
			defer ccancel()
			resp, err := post(cctx, c, p.url, body)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return
			}
			br := bufio.NewReader(resp.Body)
			for {
				line, err := br.ReadString('\n')
				if strings.HasPrefix(line, "data: [DONE]") {
					mu.Lock()
					run.completed++
					mu.Unlock()
				}
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	run.maxRunning = eng.Stats().MaxRunning
	return run
}

// TestTheAutomaticCapReachesTheEnginesConcurrencyWithLongPrompts: with
// 12,000-token prompts the engine's waiting gauge is rarely empty under load
// (each step's token budget prefills under one prompt; the rest wait their
// turn for prefill, not for a seat), yet the engine has seats and KV room
// for every one of them. At 1.5x capacity the automatic cap must grow past
// that prefill backlog to what the engine runs at once: 64 here, set by
// max_num_seqs (told to vigil as engine_max_seqs, since vLLM does not
// export it) or by the KV cache (read from vllm:kv_cache_usage_perc).
func TestTheAutomaticCapReachesTheEnginesConcurrencyWithLongPrompts(t *testing.T) {
	testinfra.Alone(t)
	testinfra.Long(t, "runs the simulated engine for several seconds")
	const concurrency = 64
	for _, tc := range []struct {
		name  string
		seats int // engine_max_seqs told to vigil
		setup func(*enginesim.Config)
	}{
		{"max_num_seqs 64, engine_max_seqs 64", concurrency, func(c *enginesim.Config) { c.MaxNumSeqs = concurrency }},
		// Each request reserves its uncached prompt (10,000) and answer
		// (300) in the KV cache: room for 64 of them.
		{"KV cache for 64, engine_max_seqs unset", 0, func(c *enginesim.Config) { c.KVCacheTokens = concurrency*10300 + 5000 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ecfg := enginesim.DefaultConfig()
			ecfg.Scale = 20
			tc.setup(&ecfg)
			run := runLongPrompts(t, ecfg, tc.seats, 1.5, 160*time.Second, 0)
			t.Logf("cap every engine second: %v", run.caps)
			// The cap grows a turnover at a time through a prefill backlog,
			// so how far it gets in the run depends on the CPU the
			// simulated engine gets: alone it averages 59-67 over the
			// second half, under CI's parallel packages 46-48 (still rising).
			// Judged on the last quarter: past the backlog (main's rules held
			// it at 4-13) to at least 70% of the engine's concurrency, and
			// never far past it.
			last := run.caps[len(run.caps)*3/4:]
			sum := 0
			for _, c := range last {
				sum += c
			}
			mean := float64(sum) / float64(len(last))
			t.Logf("cap %.1f on average over the last quarter, engine running %.1f on average, max running %d, %d completed",
				mean, run.engineRunning, run.maxRunning, run.completed)
			if mean < 0.7*concurrency || mean > 1.25*concurrency {
				t.Errorf("the automatic cap averaged %.1f over the last quarter, want from 70%% to 125%% of the engine's concurrency %d",
					mean, concurrency)
			}
		})
	}
}

// TestLongPromptsArePrefilledOneAtATime: 12,000-token prompts on an engine
// whose step prefills 8,192 tokens delay each other's first token when
// admitted together (each waits for both), and a second one beside the
// first brings first tokens about 1.3x as fast for twice the prompts. With
// vigil's default objective (2 s, far above one prefill) the first-token
// limit must find that out by itself and keep them mostly one at a time,
// while the cap still lets the engine decode many; the streams awaiting
// their first token never exceed it.
func TestLongPromptsArePrefilledOneAtATime(t *testing.T) {
	testinfra.Alone(t)
	testinfra.Long(t, "runs the simulated engine for several seconds")
	ecfg := enginesim.DefaultConfig()
	ecfg.Scale = 20
	run := runLongPrompts(t, ecfg, 0, 1.5, 160*time.Second, 2*time.Second)
	t.Logf("first-token limit every engine second: %v", run.firstTokenLimits)
	t.Logf("streams awaiting their first token: %v", run.awaiting)
	t.Logf("cap: %v; engine running %.1f on average over the second half, %d completed", run.caps, run.engineRunning, run.completed)
	half := run.firstTokenLimits[len(run.firstTokenLimits)/2:]
	sum := 0
	for _, n := range half {
		sum += n
	}
	if mean := float64(sum) / float64(len(half)); mean == 0 || mean > 1.5 {
		t.Errorf("the first-token limit averaged %.2f over the second half, want from 1 to 1.5 (a prefill at a time, a pair now and then while it probes)", mean)
	}
	for i, n := range run.awaiting {
		if lim := run.firstTokenLimits[i]; n > lim {
			t.Errorf("second %d: %d streams awaited their first token, over the limit of %d", i+1, n, lim)
		}
	}
	if run.engineRunning < 8 {
		t.Errorf("the engine ran %.1f on average: the first-token limit must bound prefills, not the answers being decoded", run.engineRunning)
	}
}
