package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/admission"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/state"
)

// Issue 23: the clients people run, as they are installed (no
// Idempotency-Key), in sdkclients/ (test.sh runs npm ci there). The
// limiter runs on the wall clock with its defaults, like the clients: a
// real SDK's timeout and backoff cannot be time-scaled. The engine is the
// simulated one at nodeScale, i.e. simply a fast engine.

const (
	nodeScale = 1
	// nodeSeqs: the engine's batch, small enough that a full one answers
	// well within the clients' timeout (a burst it absorbs).
	nodeSeqsDefault = 32
	nodeModel       = "sim-chat"
	nodeLoadDefault = 2.0 // multiple of the engine's capacity
	// nodeWarm at nodeWarmLoad precedes the burst of the warm arm: a
	// limiter serving traffic, not one just started (the cold arm); its
	// automatic cap learns the engine's 32 seats within a few windows.
	nodeWarm      = 2 * time.Second
	nodeWarmLoad  = 0.5
	nodeTimeout   = 6 * time.Second
	nodeRetries   = 3
	nodePrompt    = 1000 // characters: about 250 tokens
	nodeMaxTokens = 100  // VIGIL_NODE_TOKENS for the benchmark
	nodeEngineKey = "sk-engine-node"
	nodeClientKey = "sk-client-node"
	// nodeMinShare: the least share of calls vigil delivers at the
	// default burst, cold or after its restart (issue 41: 90%), on a
	// machine that lets the straight arm deliver as much.
	nodeMinShare = 90.0
	// nodePatience: a call unfinished this long after the burst began is
	// not delivered (the SDK's 4 attempts of 6 s and its backoff fit).
	nodePatience   = 30 * time.Second
	nodeRunTimeout = nodePatience + 10*time.Second
)

// nodeBursts is how long each client's burst lasts. The OpenAI SDK's is
// long enough that its attempts time out and retry (in the engine's
// queue straight, in vigil's through it), so adoption is exercised. The
// AI SDK never retries a timeout (its abort ends the call), so its burst
// is one the engine absorbs: at 5-6 s it is past that, and through vigil
// it delivered 10-25% fewer calls than straight (calls that waited in
// vigil's queue then time out in the engine), an open part of issue 23.
var nodeBursts = map[string]time.Duration{"openai": 5 * time.Second, "vercel": 4 * time.Second}

// nodeRun is what one client process saw.
type nodeRun struct {
	Client    string `json:"client"`
	Calls     int    `json:"calls"`
	Delivered int    `json:"delivered"`
	// The burst's calls and those delivered, the warm phase's aside: an
	// arm's share, comparable between warm and cold.
	BurstCalls     int            `json:"burstCalls"`
	BurstDelivered int            `json:"burstDelivered"`
	Failures       map[string]int `json:"failures"`
	P50Ms          int            `json:"p50Ms"`
	P99Ms          int            `json:"p99Ms"`
	WallMs         int            `json:"wallMs"`
	// executions: generation requests the engine received.
	executions uint64
	limiter    string
	adopted    uint64
	// capacity: the calls the engine could finish within the clients'
	// timeout of the burst's start (capacity x (burst + timeout)).
	capacity float64
}

func (r nodeRun) String() string {
	return fmt.Sprintf("%d of %d delivered (the burst's: %d of %d), failures %v, latency p50 %d ms p99 %d ms, %d executions at the engine",
		r.Delivered, r.Calls, r.BurstDelivered, r.BurstCalls, r.Failures, r.P50Ms, r.P99Ms, r.executions)
}

func nodeClients(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("sdkclients")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		nodeUnavailable(t, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		nodeUnavailable(t, fmt.Errorf("%w (run npm ci in %s)", err, dir))
	}
	return dir
}

// nodeUnavailable is the require rule for node or sdkclients/node_modules.
func nodeUnavailable(t *testing.T, err error) {
	t.Helper()
	testinfra.Unavailable(t, "NODE CLIENTS", testinfra.RequireNodeEnv, err)
}

// nodeEngine is the simulated engine for the node runs and its capacity
// for their calls, in calls per wall second.
func nodeEngine(t *testing.T, ctx context.Context) (*enginesim.Server, float64) {
	t.Helper()
	cfg := enginesim.DefaultConfig()
	cfg.Model, cfg.APIKey, cfg.Scale, cfg.AbortOnDisconnect = nodeModel, nodeEngineKey, nodeScale, true
	cfg.MaxNumSeqs = nodeSeqs()
	srv, err := enginesim.Start(ctx, "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	<-srv.Ready()
	c := enginesim.MeasureCapacity(cfg, nodeWorkload())
	return srv, c * nodeScale
}

// nodeWorkload is one call's size at the engine.
func nodeWorkload() enginesim.Workload {
	return enginesim.Workload{PromptTokens: nodePrompt / 4, OutputTokens: nodeTokens()}
}

// nodeLoneAnswer is how long the engine takes to answer one call alone
// (its prefill, then a decode step per further token), in wall time: no
// answer of a burst ends sooner after the burst began.
func nodeLoneAnswer() time.Duration {
	cfg := enginesim.DefaultConfig()
	cfg.MaxNumSeqs = nodeSeqs()
	w := nodeWorkload()
	d := enginesim.MeasureTTFT(cfg, w) + time.Duration(w.OutputTokens-1)*(cfg.StepOverhead+cfg.SeqCost)
	return time.Duration(float64(d) / nodeScale)
}

// runNode runs one client process against url and returns what it saw.
func runNode(ctx context.Context, dir, client, url, key string, rate float64, seed int, warm time.Duration) (nodeRun, error) {
	arg, _ := json.Marshal(map[string]any{
		"client": client, "url": url, "key": key, "model": nodeModel, "rate": rate,
		"warmRate": rate * nodeWarmLoad / nodeLoad(), "warmSeconds": warm.Seconds(),
		"seconds": nodeBurst(client).Seconds(), "timeoutMs": nodeTimeout.Milliseconds(), "maxRetries": nodeRetries,
		"promptChars": nodePrompt, "maxTokens": nodeTokens(), "stream": false, "seed": seed,
		"patienceMs": nodePatience.Milliseconds(),
	})
	cctx, cancel := context.WithTimeout(ctx, nodeRunTimeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, "node", filepath.Join(dir, "load.mjs"), string(arg))
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nodeRun{}, fmt.Errorf("node %s: %w: %s", client, err, errb.String())
	}
	var r nodeRun
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return nodeRun{}, fmt.Errorf("node %s: read %q: %w", client, out.String(), err)
	}
	return r, nil
}

// nodeArm is how vigil meets the burst: after a warm phase (warm > 0) or
// started just before it (cold), on its own engine or on one it served
// before (engine, with the state it kept: a restart).
type nodeArm struct {
	name   string
	warm   time.Duration
	engine *enginesim.Server      // nil: a new engine
	store  admission.LearnedStore // what vigil keeps across its restart (nil: nothing)
}

// compareNode runs client at nodeLoad times capacity straight at one
// engine and through vigil in front of another, both at once. The
// limiter is closed before it returns (writing what it learned to the
// arm's store); the engine behind it is returned for a restart arm.
func compareNode(t *testing.T, dir, client string, seed int, arm nodeArm) (direct, vigil nodeRun, engV *enginesim.Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	engD, c := nodeEngine(t, ctx)
	engV = arm.engine
	if engV == nil {
		engV, _ = nodeEngine(t, ctx)
	}
	cfg := configs.Default().Admission
	cfg.EngineMaxSeqs = nodeSeqs()
	if o := os.Getenv("VIGIL_NODE_ORDER"); o != "" {
		cfg.Order = o
	}
	var opts []admission.Option
	if arm.store != nil {
		opts = append(opts, admission.WithLearnedStore(arm.store))
	}
	lim, err := StartLimiter(ctx, cfg, engV.URL(), nodeEngineKey, 1, TimeClock, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	startCap := lim.Stats().Cap
	rate := nodeLoad() * c
	recvD, recvV := engD.Engine.Stats().Received, engV.Engine.Stats().Received
	var wg sync.WaitGroup
	var errD, errV error
	sctx, stopSampler := context.WithCancel(ctx)
	var timeline []string
	if testing.Verbose() {
		// vigil's cap and queues beside its engine's gauges, for the log.
		wg.Go(func() {
			t0 := time.Now()
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-sctx.Done():
					return
				case <-tick.C:
				}
				e, s := engV.Engine.Stats(), lim.Stats()
				timeline = append(timeline, fmt.Sprintf("%4.1fs cap=%d in_flight=%d queue=%d engine running=%d waiting=%d completed=%d rejected=%d abandoned=%d cancelled=%d",
					time.Since(t0).Seconds(), s.Cap, s.InFlight, s.QueueDepth, e.Running, e.Waiting+e.Pending, e.Completed, sumRejected(s.Rejected), s.QueueAbandoned, s.CancelledImmediate))
			}
		})
	}
	var runs sync.WaitGroup
	runs.Go(func() { direct, errD = runNode(ctx, dir, client, engD.URL(), nodeEngineKey, rate, seed, arm.warm) })
	runs.Go(func() { vigil, errV = runNode(ctx, dir, client, lim.URL(), nodeClientKey, rate, seed, arm.warm) })
	runs.Wait()
	stopSampler()
	wg.Wait()
	if testing.Verbose() {
		t.Logf("%s, %s, through vigil:\n  %s", client, arm.name, strings.Join(timeline, "\n  "))
	}
	if errD != nil || errV != nil {
		t.Fatalf("direct: %v; vigil: %v\n  limiter: %s", errD, errV, lim.Summary())
	}
	direct.executions, vigil.executions = engD.Engine.Stats().Received-recvD, engV.Engine.Stats().Received-recvV
	direct.capacity = c * (nodeBurst(client) + nodeTimeout).Seconds()
	// A call is finished within its timeout only if it started a service
	// time before it: the engine, empty when the burst begins, completes
	// nothing for one full batch's service time (seats / capacity), so
	// within the burst and the timeout it completes at most this many.
	inTime := c * (nodeBurst(client) + nodeTimeout - time.Duration(float64(nodeSeqs())/c*float64(time.Second))).Seconds()
	// An estimate of the burst's calls delivered when the client's timeout
	// covers the whole call (the AI SDK's abort; the OpenAI SDK retries
	// past it): the engine completes at most its capacity a second, and
	// nothing before one call's lone answer time. Not a strict bound: work
	// done before the first answer is out finishes after it (nodeBest's
	// oracle beats it on a small engine); the engine's work, capacity x
	// (burst + timeout), is.
	bound := c * (nodeBurst(client) + nodeTimeout - nodeLoneAnswer()).Seconds()
	burstCalls := math.Round(rate * nodeBurst(client).Seconds()) // as load.mjs counts them
	best, margins, offline := nodeBest(client, rate, arm.warm)
	s := lim.Stats()
	vigil.limiter, vigil.adopted = lim.Summary(), s.Adopted+s.AdoptedStored
	t.Logf("%s, %s: %.1fx capacity after %v at %.1fx (%.1f calls/s for %v, timeout %v, %d retries; cap at the start %d):\n  direct: %v\n  vigil:  %v\n  limiter: %s\n  the engine could finish about %.0f calls within the timeout (%.0f started a batch's service time before it; with one timeout for the whole call about %.0f, %.1f%% of the burst's %.0f, ending a lone answer's %v after the burst began): straight %.1f%%, vigil %.1f%% of the burst's calls; vigil/straight %.2fx\n  with one timeout for the whole call the best clairvoyant admission delivers %d of the %d calls (%.1f%%), margin %s; the same offline model straight at the engine %d",
		client, arm.name, nodeLoad(), arm.warm, nodeWarmLoad, rate, nodeBurst(client), nodeTimeout, nodeRetries, startCap,
		direct, vigil, vigil.limiter, direct.capacity, inTime, bound, 100*bound/max(1, burstCalls), burstCalls, nodeLoneAnswer().Round(time.Millisecond), direct.share(), vigil.share(), float64(vigil.Delivered)/float64(max(1, direct.Delivered)),
		best, direct.Calls, 100*float64(best)/float64(max(1, direct.Calls)), margins, offline)
	return direct, vigil, engV
}

// nodeBest is what the best of enginesim's clairvoyant admissions
// (BestDelivered: the engine's queue kept empty, calls too near their
// deadline dropped) delivers of the calls load.mjs sends at rate after a
// warm phase of warm, with nodeTimeout covering the whole call, and the
// margins it keeps, in wall time from load.mjs's start. It is measured
// offline on the engine's own scheduler: a lower bound on what any
// admission in front of this engine delivers (the engine's work,
// capacity x (burst + timeout), an upper one). straight is what the same
// offline model delivers with no admission, to set beside the measured
// straight arm: how closely the model follows the live run.
func nodeBest(client string, rate float64, warm time.Duration) (best int, margins string, straight int) {
	cfg := enginesim.DefaultConfig()
	cfg.MaxNumSeqs = nodeSeqs()
	// load.mjs's arrivals, in wall milliseconds from its start, evenly
	// spaced: the warm phase's, then the burst's.
	engineAt := func(ms float64) time.Duration { return time.Duration(ms * nodeScale * float64(time.Millisecond)) }
	var at []time.Duration
	warmRate := rate * nodeWarmLoad / nodeLoad()
	for i := range int(math.Round(warmRate * warm.Seconds())) {
		at = append(at, engineAt(float64(i)*1000/warmRate))
	}
	for i := range int(math.Round(rate * nodeBurst(client).Seconds())) {
		at = append(at, engineAt(warm.Seconds()*1000+float64(i)*1000/rate))
	}
	timeout := time.Duration(float64(nodeTimeout) * nodeScale)
	best, a := enginesim.BestDelivered(cfg, nodeWorkload(), at, timeout)
	straight = enginesim.Deliver(cfg, nodeWorkload(), at, timeout, enginesim.Admission{})
	wall := func(d time.Duration) time.Duration {
		return time.Duration(float64(d) / nodeScale).Round(time.Millisecond)
	}
	margins = wall(a.Margin).String()
	if a.LateFrom > 0 {
		margins += fmt.Sprintf(", %v from %v on", wall(a.LateMargin), wall(a.LateFrom))
	}
	if a.NewestFirst {
		margins += ", newest first"
	}
	return best, margins, straight
}

// share is the burst's calls delivered, in percent.
func (r nodeRun) share() float64 {
	return 100 * float64(r.BurstDelivered) / float64(max(1, r.BurstCalls))
}

// nodeSeqs is the engine's batch: nodeSeqsDefault, or VIGIL_NODE_SEQS for
// the benchmark (bench/README.md, issue 41).
func nodeSeqs() int {
	if n, err := strconv.Atoi(os.Getenv("VIGIL_NODE_SEQS")); err == nil && n > 0 {
		return n
	}
	return nodeSeqsDefault
}

// nodeTokens is each answer's length: nodeMaxTokens, or VIGIL_NODE_TOKENS
// for the benchmark (shorter answers: an engine whose answer takes a
// smaller part of the clients' timeout).
func nodeTokens() int {
	if n, err := strconv.Atoi(os.Getenv("VIGIL_NODE_TOKENS")); err == nil && n > 0 {
		return n
	}
	return nodeMaxTokens
}

// nodeLoad is the burst's rate as a multiple of the engine's capacity:
// nodeLoadDefault, or VIGIL_NODE_LOAD for the benchmark (issue 41's own
// shape is 1.74x: 1,064 calls in 10 s at ~61 calls/s).
func nodeLoad() float64 {
	if f, err := strconv.ParseFloat(os.Getenv("VIGIL_NODE_LOAD"), 64); err == nil && f > 0 {
		return f
	}
	return nodeLoadDefault
}

// nodeBurst is how long client's burst lasts: nodeBursts, or
// VIGIL_NODE_BURST (a Go duration) for the benchmark.
func nodeBurst(client string) time.Duration {
	if d, err := time.ParseDuration(os.Getenv("VIGIL_NODE_BURST")); err == nil && d > 0 {
		return d
	}
	return nodeBursts[client]
}

// TestRealSDKsThroughVigilDeliverAtLeastAsMuchAsStraight is issue 23's
// measurement with the real clients: the OpenAI Node SDK (its 3 retries,
// X-Stainless-Retry-Count, no key) and the Vercel AI SDK (no retry marker;
// its timeout aborts the call), a burst at twice the engine's capacity,
// straight at one engine and through vigil's defaults in front of another
// in the same run. vigil must deliver at least as many calls and create no
// more executions.
func TestRealSDKsThroughVigilDeliverAtLeastAsMuchAsStraight(t *testing.T) {
	testinfra.Alone(t)
	dir := nodeClients(t)
	check := func(t *testing.T, client string, direct, vigil nodeRun) {
		t.Helper()
		if vigil.Delivered < direct.Delivered {
			t.Errorf("%s: through vigil %d of %d calls delivered, straight %d: want at least as many",
				client, vigil.Delivered, vigil.Calls, direct.Delivered)
		}
		if vigil.executions > direct.executions {
			t.Errorf("%s: through vigil the engine received %d executions, straight %d: want no more",
				client, vigil.executions, direct.executions)
		}
	}
	// Issue 41: each client after a warm phase, then the same burst
	// against a vigil started just before it (cold), and again against
	// that engine once vigil was restarted on the state it kept (after a
	// restart). The OpenAI SDK runs the warm arm only, unless
	// VIGIL_NODE_ARMS=all (the benchmark): CI time.
	for i, client := range []string{"openai", "vercel"} {
		if only := os.Getenv("VIGIL_NODE_CLIENTS"); only != "" && !slices.Contains(strings.Split(only, ","), client) {
			continue // the benchmark's choice of clients
		}
		t.Run(client, func(t *testing.T) {
			direct, warm, _ := compareNode(t, dir, client, 3*i, nodeArm{name: "warm", warm: nodeWarm})
			check(t, client, direct, warm)
			if client == "openai" && os.Getenv("VIGIL_NODE_ARMS") != "all" {
				return
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			engV, _ := nodeEngine(t, ctx) // outlives the cold arm's vigil, for the restarted one
			arm := nodeArm{engine: engV, store: state.Memory()}
			for j, name := range []string{"cold", "after a restart"} {
				arm.name = name
				t.Run(name, func(t *testing.T) {
					direct, vigil, _ := compareNode(t, dir, client, 3*i+1+j, arm)
					check(t, client+" "+name, direct, vigil)
					// Issue 41 asks as many delivered as warm; at the CI's
					// burst every arm delivers all, so it is read here,
					// at the benchmark's shape (bench/README.md).
					t.Logf("%s %s: vigil delivered %.1f%% of the burst's calls, warm %.1f%%", client, name, vigil.share(), warm.share())
					// The share is judged where the machine carried the
					// burst: straight at the engine at least as much got
					// through (a starved engine delivers less to both).
					if vigil.share() < nodeMinShare && direct.share() >= nodeMinShare {
						t.Errorf("%s %s: vigil delivered %.1f%% of the burst's calls (straight %.1f%%), want at least %.0f%%",
							client, name, vigil.share(), direct.share(), nodeMinShare)
					}
				})
			}
		})
	}
}
