package harness

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/simclient"
)

// The overload experiment of "Cancellation Is Not Enough" (Zhang and
// Wang, arXiv:2611.08684), in engine time: 120 s at 0.6 C, a 107 s pulse at
// 2.7 C, a 720 s hold at 0.6 C. bench/metastable runs it against one
// engine, bench/pool against a pool behind HAProxy; both draw the same
// calls from the same seed.
const (
	PaperWarmRate, PaperPulseRate, PaperHoldRate = 0.6, 2.7, 0.6 // multiples of C
	PaperWarmFor                                 = 120 * time.Second
	PaperPulseFor                                = 107 * time.Second
	PaperHoldFor                                 = 720 * time.Second
	// PaperDeliveredWithin is the paper's horizon for "delivered": a call
	// answered more than this after it started does not count. Every call
	// ends well before it (4 attempts x 120 s + 3 waits of at most 60 s).
	PaperDeliveredWithin = 840 * time.Second

	paperPromptMean, paperPromptSpread = 12000, 1200 // uniform 12,000 ± 1,200 tokens
	paperPrefixTokens                  = 2000        // shared by every prompt
	paperAnswerMedian, paperAnswerSig  = 300, 0.5    // lognormal answer lengths
	paperAnswerMax                     = 1200        // cap: 4x the median

	// PaperModel is the simulated engine's model name.
	PaperModel = "sim-llama-8b"
)

// Phase indexes in PaperPhases.
const (
	PhaseWarm = iota
	PhasePulse
	PhaseHold
)

// PaperPhases is the schedule for capacity c (calls per engine second),
// with the hold lasting hold (PaperHoldFor in the paper).
func PaperPhases(c float64, hold time.Duration) []Phase {
	return []Phase{
		{Name: "warm", Duration: PaperWarmFor, Rate: PaperWarmRate * c},
		{Name: "pulse", Duration: PaperPulseFor, Rate: PaperPulseRate * c},
		{Name: "hold", Duration: hold, Rate: PaperHoldRate * c},
	}
}

// PaperEngineConfig is the calibrated default simulated engine at the
// run's scale, answering to apiKey.
func PaperEngineConfig(scale float64, abort bool, apiKey string) enginesim.Config {
	cfg := enginesim.DefaultConfig()
	cfg.Model = PaperModel
	cfg.APIKey = apiKey
	cfg.Scale = scale
	cfg.AbortOnDisconnect = abort
	return cfg
}

// PaperCall draws one call of the paper's shape.
func PaperCall(rng *rand.Rand) simclient.SimCall {
	return simclient.SimCall{
		Prompt:   paperPromptMean - paperPromptSpread + rng.IntN(2*paperPromptSpread+1),
		Prefix:   paperPrefixTokens,
		PrefixID: "shared-system-prompt",
		Output:   LogNormal(rng, paperAnswerMedian, paperAnswerSig, paperAnswerMax),
	}
}

// PaperCapacity is C, one simulated engine's capacity in calls per engine
// second for the paper's workload (enginesim.MeasureCapacity), and a line
// saying how it was found.
func PaperCapacity(scale float64) (float64, string) {
	meanAnswer := MeanLogNormal(paperAnswerMedian, paperAnswerSig, paperAnswerMax)
	w := enginesim.Workload{PromptTokens: paperPromptMean, PrefixTokens: paperPrefixTokens, OutputTokens: int(math.Round(meanAnswer))}
	c := enginesim.MeasureCapacity(PaperEngineConfig(scale, true, ""), w)
	return c, fmt.Sprintf("Capacity C (enginesim.MeasureCapacity, %d-token prompts, %d-token prefix, %.0f-token mean answer): %.3f calls/s (engine time)",
		w.PromptTokens, w.PrefixTokens, meanAnswer, c)
}

// PaperCalls draws the run's arrivals over phases and one body per
// arrival, from seed (the same calls for every arm of a run).
func PaperCalls(seed uint64, phases []Phase) ([]Arrival, [][]byte) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	arrivals := Arrivals(rng, phases)
	bodies := make([][]byte, len(arrivals))
	for i := range arrivals {
		bodies[i] = PaperCall(rng).Body(PaperModel, false)
	}
	return arrivals, bodies
}

// CallKey is call i's Idempotency-Key in a run drawn from seed.
func CallKey(seed uint64, i int) string { return fmt.Sprintf("call-%d-%d", seed, i) }

// SendAll starts call i at arrivals[i].At on clock (open loop), each with
// body bodies[i] and key CallKey(seed, i), and waits until every call has
// ended. The results are indexed like arrivals; a call not started
// because ctx ended is left zero.
func SendAll(ctx context.Context, clock *simclient.Clock, caller *simclient.Caller, seed uint64, arrivals []Arrival, bodies [][]byte) []simclient.Result {
	return send(ctx, clock, caller, arrivals, bodies, func(i int) string { return CallKey(seed, i) })
}

// SendAllKeyless is SendAll without an Idempotency-Key, as the OpenAI SDKs
// send by default.
func SendAllKeyless(ctx context.Context, clock *simclient.Clock, caller *simclient.Caller, arrivals []Arrival, bodies [][]byte) []simclient.Result {
	return send(ctx, clock, caller, arrivals, bodies, func(int) string { return "" })
}

func send(ctx context.Context, clock *simclient.Clock, caller *simclient.Caller, arrivals []Arrival, bodies [][]byte, key func(int) string) []simclient.Result {
	res := make([]simclient.Result, len(arrivals))
	var calls sync.WaitGroup
	for i, ar := range arrivals {
		if !clock.SleepUntil(ctx, ar.At) {
			break
		}
		calls.Go(func() {
			// Every call ends by itself well within PaperDeliveredWithin;
			// the deadline only bounds the loop if something wedges.
			cctx, ccancel := context.WithTimeout(ctx, clock.Wall(PaperDeliveredWithin))
			defer ccancel()
			res[i] = caller.Do(cctx, simclient.Request{Body: bodies[i], Key: key(i)})
		})
	}
	calls.Wait()
	return res
}

// PaperFigures are what became of the calls of one arm, by phase.
type PaperFigures struct {
	PulseCalls, HoldCalls int
	// Shares of calls delivered within PaperDeliveredWithin of their start.
	PulseDelivered, HoldDelivered float64
	// PulseLate: pulse calls delivered after their first attempt's
	// deadline.
	PulseLate float64
	// HoldOnTime: hold calls delivered within their first attempt's
	// deadline (120 s after the call started).
	HoldOnTime float64
	// Attempts per call, over every call; Retries is their sum minus the
	// calls (what the client resent).
	Attempts float64
	Retries  int
}

// MeasurePaper sorts calls (phase[i] is call i's phase) into the figures.
func MeasurePaper(calls []simclient.Result, phase []int) PaperFigures {
	var f PaperFigures
	var pulseOK, pulseLate, holdOK, holdOnTime, attempts int
	firstDeadline := PaperPolicy().Timeout
	for i, call := range calls {
		attempts += call.Attempts
		if call.Attempts > 1 {
			f.Retries += call.Attempts - 1
		}
		ok := call.Delivered && call.DeliveredAt-call.Start <= PaperDeliveredWithin
		onTime := call.Delivered && call.DeliveredAt-call.Start <= firstDeadline
		switch phase[i] {
		case PhasePulse:
			f.PulseCalls++
			if ok {
				pulseOK++
				if !onTime {
					pulseLate++
				}
			}
		case PhaseHold:
			f.HoldCalls++
			if ok {
				holdOK++
			}
			if onTime {
				holdOnTime++
			}
		}
	}
	f.PulseDelivered = Share(pulseOK, f.PulseCalls)
	f.PulseLate = Share(pulseLate, f.PulseCalls)
	f.HoldDelivered = Share(holdOK, f.HoldCalls)
	f.HoldOnTime = Share(holdOnTime, f.HoldCalls)
	f.Attempts = Share(attempts, len(calls))
	return f
}

// PaperPolicy is the client of "Cancellation Is Not Enough": attempts time
// out at 120 s and are retried 3 times after a uniform 0.25-3 s, with the
// OpenAI SDKs' handling of Retry-After (at most 60 s honoured).
func PaperPolicy() simclient.RetryPolicy {
	return simclient.RetryPolicy{MaxRetries: 3, Timeout: 120 * time.Second,
		BackoffMin: 250 * time.Millisecond, BackoffMax: 3 * time.Second, MaxRetryAfter: 60 * time.Second}
}
