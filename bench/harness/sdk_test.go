package harness

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/enginesim"

	"github.com/vigil-dev/vigil/internal/simclient"
	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/util/humanize"
)

// Issue 17's clients as CI-speed runs of the simulated engine, time-scaled,
// direct and through vigil's limiter with its defaults (on an engine-time
// clock, TimeClock, so every duration it knows keeps its proportion).

const (
	sdkEngineKey = "sk-engine-sdk"
	sdkClientKey = "sk-client-sdk"
)

// sdkTarget is an engine, and vigil in front of it when viaVigil, for one
// run; url is where the clients send.
type sdkTarget struct {
	engine      *enginesim.Server
	lim         *Limiter
	url, key    string
	headerScale float64
}

func startSDKTarget(t *testing.T, ctx context.Context, scale float64, viaVigil bool) sdkTarget {
	t.Helper()
	srv, err := enginesim.Start(ctx, "127.0.0.1:0", PaperEngineConfig(scale, true, sdkEngineKey))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	<-srv.Ready()
	tg := sdkTarget{engine: srv, url: srv.URL(), key: sdkEngineKey, headerScale: 1}
	if viaVigil {
		lim, err := StartLimiter(ctx, configs.Default().Admission, srv.URL(), sdkEngineKey, scale, TimeClock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(lim.Close)
		tg.lim, tg.url, tg.key, tg.headerScale = lim, lim.URL(), sdkClientKey, lim.HeaderScale()
	}
	return tg
}

// paperCapacity is PaperCapacity, measured once a scale for the package's
// runs (it drives the scheduler offline, seconds under -race).
func paperCapacity(scale float64) float64 {
	capacities.mu.Lock()
	defer capacities.mu.Unlock()
	if c, ok := capacities.m[scale]; ok {
		return c
	}
	c, _ := PaperCapacity(scale)
	capacities.m[scale] = c
	return c
}

var capacities = struct {
	mu sync.Mutex
	m  map[float64]float64
}{m: map[float64]float64{}}

// The bench/metastable burst, reduced for CI: the paper's schedule and
// calls (PaperPhases, PaperCalls, PaperPolicy: 120 s at 0.6 C, a 107 s
// pulse at 2.7 C, then 0.6 C) with the hold cut from 720 s to
// metastableHold (the pulse's backlog has drained well before: the
// metastable timeline shows the queue empty by about 500 s), at scale
// metastableScale instead of 25.
const (
	metastableScale = 80
	metastableHold  = 360 * time.Second
)

// runBurst sends the reduced burst through vigil's defaults, the clients
// announcing their 120 s timeout (X-Stainless-Timeout) or not (the Node
// SDK with a client-level timeout).
func runBurst(t *testing.T, omitHeader bool) (PaperFigures, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := paperCapacity(metastableScale)
	tg := startSDKTarget(t, ctx, metastableScale, true)
	ph := PaperPhases(c, metastableHold)
	arrivals, bodies := PaperCalls(1, ph)
	clock := simclient.NewClock(metastableScale)
	caller := simclient.NewCaller(tg.url+"/v1/completions", tg.key, clock, PaperPolicy(), 1)
	caller.HeaderScale = tg.headerScale
	caller.OmitTimeoutHeader = omitHeader
	defer caller.CloseIdle()
	// The limiter's state every 30 engine seconds, for the log.
	var timeline []string
	sctx, stopSampler := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for at := 30 * time.Second; clock.SleepUntil(sctx, at); at += 30 * time.Second {
			e := tg.engine.Engine.Stats()
			timeline = append(timeline, fmt.Sprintf("t=%v engine waiting=%d running=%d %s", at, e.Waiting+e.Pending, e.Running, tg.lim.Brief()))
		}
	})
	calls := SendAll(ctx, clock, caller, 1, arrivals, bodies)
	stopSampler()
	sampler.Wait()
	if testing.Verbose() {
		t.Logf("timeline (header omitted: %v):\n  %s", omitHeader, strings.Join(timeline, "\n  "))
	}
	phase := make([]int, len(arrivals))
	for i, a := range arrivals {
		phase[i] = a.Phase
	}
	s := tg.lim.Stats()
	return MeasurePaper(calls, phase), tg.lim.Summary() + " learned=" + formatLearned(s.LearnedClientTimeouts)
}

func formatLearned(m map[string]time.Duration) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k].String())
	}
	return "{" + strings.Join(out, " ") + "}"
}

// burstFigures logs the two runs of the burst, with the header and
// without.
func burstFigures(t *testing.T) (with, without PaperFigures) {
	with, withLim := runBurst(t, false)
	without, withoutLim := runBurst(t, true)
	for _, r := range []struct {
		name string
		f    PaperFigures
		lim  string
	}{{"X-Stainless-Timeout announced", with, withLim}, {"no header (Node SDK, client-level timeout)", without, withoutLim}} {
		t.Logf("%s: pulse %d calls, delivered %s, within the first deadline %s; hold %d calls, delivered %s, within the first deadline %s; %.2f attempts a call\n  limiter: %s",
			r.name, r.f.PulseCalls, humanize.Pct(r.f.PulseDelivered), humanize.Pct(pulseOnTime(r.f)), r.f.HoldCalls, humanize.Pct(r.f.HoldDelivered), humanize.Pct(r.f.HoldOnTime), r.f.Attempts, r.lim)
	}
	return with, without
}

func pulseOnTime(f PaperFigures) float64 { return f.PulseDelivered - f.PulseLate }

// TestTheBurstIsDeliveredWithoutTheTimeoutHeader is issue 17's row: the
// OpenAI Node SDK with its timeout set on the client sends no
// X-Stainless-Timeout. Before vigil inferred a client's deadline the
// metastable burst then delivered 93-97% of its pulse calls instead of
// about 100%: a queued call could wait out its whole 5 min
// max_queue_wait, long past its client's 120 s. Learned from the clients'
// give-ups (keyed retries), the route's timeout must make the headerless
// run deliver as the announcing one does. Without the learned timeouts the
// headerless arm falls far below the 5-point tolerance. Delivered is
// judged, not delivered on time: on time, the headerless run stays behind
// until the first give-up teaches the timeout (not met; figures and why:
// bench/README.md, "Figures once kept in code comments", the burst
// without the timeout header).
func TestTheBurstIsDeliveredWithoutTheTimeoutHeader(t *testing.T) {
	testinfra.Alone(t)
	testinfra.Long(t, "runs the simulated engine through vigil for about 20 s")
	with, without := burstFigures(t)
	const tol = 0.05
	if without.PulseDelivered < with.PulseDelivered-tol {
		t.Errorf("without the header %s of the pulse was delivered, with it %s: want within %.0f points",
			humanize.Pct(without.PulseDelivered), humanize.Pct(with.PulseDelivered), tol*100)
	}
	if without.HoldDelivered < with.HoldDelivered-tol {
		t.Errorf("without the header %s of the hold was delivered, with it %s: want within %.0f points",
			humanize.Pct(without.HoldDelivered), humanize.Pct(with.HoldDelivered), tol*100)
	}
}

// sdkPolicy is the OpenAI Node SDK as issue 17 ran it: a 6 s timeout set
// on the client (no X-Stainless-Timeout; the timeout covers the attempt
// until its headers arrive, which an engine sends at once for a stream),
// 3 retries after the SDK's 0.5-8 s backoff, Retry-After honoured up to
// 60 s.
func sdkPolicy() simclient.RetryPolicy {
	return simclient.RetryPolicy{MaxRetries: 3, Timeout: 6 * time.Second, BackoffMin: 500 * time.Millisecond,
		BackoffMax: 8 * time.Second, MaxRetryAfter: 60 * time.Second, TimeoutUntilHeaders: true}
}

// sdkRun is what the SDK's calls saw in one run.
type sdkRun struct {
	calls, delivered, timeouts, attempts int
	// served: delivered with the first token within sdkObjective of the
	// call's start (retries included).
	served   int
	p50, p99 time.Duration // first token from the call's start, delivered calls
	statuses map[int]int
	limiter  string
}

// sdkObjective: a first token later than this after the user asked is no
// longer worth much to an interactive caller with a 6 s timeout.
const sdkObjective = 10 * time.Second

const (
	sdkScale  = 20
	sdkWindow = 90 * time.Second // engine time of arrivals
	// sdkPatience: a call still running this long after it started is
	// abandoned (counts as not delivered), so a run ends soon after its
	// window.
	sdkPatience = 90 * time.Second
)

// runSDK sends streamed calls of the paper's shape (12,000 ± 1,200-token
// prompts sharing a 2,000-token prefix, lognormal answers of median 300
// tokens) at load x the engine's capacity for sdkWindow, open loop, from
// the Node SDK client, direct or through vigil's defaults.
func runSDK(t *testing.T, load float64, viaVigil bool) sdkRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := paperCapacity(sdkScale)
	tg := startSDKTarget(t, ctx, sdkScale, viaVigil)
	rng := rand.New(rand.NewPCG(17, 0x5d4))
	arrivals := Arrivals(rng, []Phase{{Name: "load", Duration: sdkWindow, Rate: load * c}})
	bodies := make([][]byte, len(arrivals))
	for i := range arrivals {
		bodies[i] = PaperCall(rng).Body(PaperModel, true)
	}
	clock := simclient.NewClock(sdkScale)
	caller := simclient.NewCaller(tg.url+"/v1/completions", tg.key, clock, sdkPolicy(), 17)
	caller.HeaderScale = tg.headerScale
	caller.OmitTimeoutHeader = true
	defer caller.CloseIdle()
	var timeline []string
	sctx, stopSampler := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	if testing.Verbose() {
		sampler.Go(func() {
			for at := 5 * time.Second; clock.SleepUntil(sctx, at); at += 5 * time.Second {
				e := tg.engine.Engine.Stats()
				line := fmt.Sprintf("t=%v engine waiting=%d running=%d", at, e.Waiting+e.Pending, e.Running)
				if tg.lim != nil {
					st := tg.lim.Stats()
					line += fmt.Sprintf(" %s ftl=%d awaiting=%d obj=%v", tg.lim.Brief(), st.FirstTokenLimit, st.AwaitingFirstToken, st.TTFTObjective)
				}
				timeline = append(timeline, line)
			}
		})
	}

	res := make([]simclient.Result, len(arrivals))
	var wg sync.WaitGroup
	for i, ar := range arrivals {
		if !clock.SleepUntil(ctx, ar.At) {
			break
		}
		wg.Go(func() {
			cctx, ccancel := context.WithTimeout(ctx, clock.Wall(sdkPatience))
			defer ccancel()
			res[i] = caller.Do(cctx, simclient.Request{Body: bodies[i], Key: CallKey(17, i), Stream: true})
		})
	}
	wg.Wait()
	stopSampler()
	sampler.Wait()
	if testing.Verbose() {
		t.Logf("timeline (via vigil: %v):\n  %s", viaVigil, strings.Join(timeline, "\n  "))
		lost := map[string]int{}
		for i, r := range res {
			if r.Delivered {
				continue
			}
			k := fmt.Sprintf("arr<%ds att=%d to=%d st=%v", int(arrivals[i].At/(30*time.Second))*30+30, r.Attempts, r.Timeouts, r.Statuses)
			lost[k]++
		}
		for _, k := range slices.Sorted(maps.Keys(lost)) {
			t.Logf("lost %3d: %s", lost[k], k)
		}
	}

	run := sdkRun{calls: len(res), statuses: map[int]int{}}
	var ttfts []time.Duration
	for _, r := range res {
		run.attempts += r.Attempts
		run.timeouts += r.Timeouts
		for k, v := range r.Statuses {
			run.statuses[k] += v
		}
		if !r.Delivered {
			continue
		}
		run.delivered++
		ttfts = append(ttfts, r.TTFT)
		if r.TTFT <= sdkObjective {
			run.served++
		}
	}
	slices.Sort(ttfts)
	if n := len(ttfts); n > 0 {
		run.p50, run.p99 = ttfts[n/2], ttfts[min(n-1, n*99/100)]
	}
	if tg.lim != nil {
		st := tg.lim.Stats()
		run.limiter = tg.lim.Summary() + " learned=" + formatLearned(st.LearnedClientTimeouts) +
			fmt.Sprintf(" patient=%v", st.PatientStreamRoutes)
	}
	return run
}

func (r sdkRun) String() string {
	return fmt.Sprintf("%s of %d calls delivered, %d with the first token within %v, %d timeouts, %d attempts, statuses %v, first token p50 %v p99 %v",
		humanize.Pct(Share(r.delivered, r.calls)), r.calls, r.served, sdkObjective, r.timeouts, r.attempts, r.statuses,
		r.p50.Round(10*time.Millisecond), r.p99.Round(10*time.Millisecond))
}

// compareSDK runs the SDK shape at load x capacity straight at the engine
// and through vigil, logs both and fails the test if vigil added timeouts:
// a few are vigil's to make while it learns the route's timeout from its
// clients giving up (3 give-ups, confirmed by their retries); past that,
// none.
func compareSDK(t *testing.T, load float64) (direct, vigil sdkRun) {
	t.Helper()
	direct = runSDK(t, load, false)
	vigil = runSDK(t, load, true)
	t.Logf("direct: %v", direct)
	t.Logf("vigil:  %v\n  limiter: %s", vigil, vigil.limiter)
	if tol := max(3, vigil.calls/100); vigil.timeouts > direct.timeouts+tol {
		t.Errorf("through vigil the SDK saw %d timeouts, direct %d: want at most %d more", vigil.timeouts, direct.timeouts, tol)
	}
	return direct, vigil
}

// TestTheSDKShapeAtModerateOverload is issue 17's SDK experiment: the Node
// SDK (6 s client-level timeout, no header, 3 retries) streaming
// 12,000-token prompts at 1.5x the engine's capacity. Direct, the engine
// sends a stream's headers at once, so the SDK's timeout never fires;
// through vigil (before the prefill-backlog rule, the inferred deadlines
// and the streams' queue bound) it saw 311 timeouts and a p99 of 15.3 s
// against direct's 0 and 5.0 s. vigil must not make it worse.
//
// Here 1.5x is of enginesim.MeasureCapacity, a true overload (the engine's
// queue grows), so direct's first tokens come later and later; the SDK
// never times out direct, its headers arriving at once. The scale is 20:
// at 30 the 6 s timeout is 200 ms of wall time, which a starved loop of
// client, vigil and engine misses (figures: bench/README.md, "Figures once
// kept in code comments", the Node SDK's shape through vigil).
func TestTheSDKShapeAtModerateOverload(t *testing.T) {
	testinfra.Alone(t)
	testinfra.Long(t, "runs the simulated engine for about 20 s")
	direct, vigil := compareSDK(t, 1.5)
	// Latency: judged on the median first token from the call's start,
	// retries included, and the counts. Not on the p99: both arms' p99 is
	// the tail of calls near the 90 s patience (its tail, through vigil,
	// the calls turned away and retried), so it compares noise.
	if vigil.p50 > direct.p50 {
		t.Errorf("through vigil the first token's median was %v, direct %v: want no later", vigil.p50, direct.p50)
	}
	if vigil.served < direct.served || vigil.delivered < direct.delivered {
		t.Errorf("through vigil %d calls delivered, %d with the first token within %v; direct %d and %d: want no fewer",
			vigil.delivered, vigil.served, sdkObjective, direct.delivered, direct.served)
	}
}

// TestTheSDKShapeUnderARetryStorm is the same clients at 2.5x capacity.
// Direct, the Node SDK still never times out (headers at once) and so
// never retries: the storm is vigil's own 503s coming back (figures:
// bench/README.md, as above).
func TestTheSDKShapeUnderARetryStorm(t *testing.T) {
	testinfra.Alone(t)
	testinfra.Long(t, "runs the simulated engine for about 20 s")
	direct, vigil := compareSDK(t, 2.5)
	if vigil.served <= direct.served || vigil.delivered <= direct.delivered {
		t.Errorf("through vigil %d calls delivered, %d with the first token within %v; direct %d and %d: want more of both",
			vigil.delivered, vigil.served, sdkObjective, direct.delivered, direct.served)
	}
}
