package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/simclient"
)

// kneeSteps are the open-loop rates (multiples of MeasureCapacity's C)
// the live engine is driven at, kneeStep engine seconds each, in order.
var kneeSteps = []float64{0.9, 1.0, 1.1, 1.2}

const kneeStep = 150 * time.Second

// knee drives a live engine (over HTTP, at the run's scale, no timeouts,
// no retries) with open-loop Poisson arrivals at rising rates and reports
// where its waiting queue starts to grow, and the completion rate it
// sustains while overloaded: the capacity as a client would find it.
func knee(ctx context.Context, o options, c float64, stderr io.Writer) (string, error) {
	fmt.Fprintf(stderr, "metastable: open-loop capacity check (%d steps of %v) ...\n", len(kneeSteps), kneeStep)
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv, err := enginesim.Start(ctx, "127.0.0.1:0", engineConfig(o.scale, true))
	if err != nil {
		return "", fmt.Errorf("capacity check: start engine: %w", err)
	}
	defer srv.Close()
	<-srv.Ready()
	ph := make([]harness.Phase, len(kneeSteps))
	for i, k := range kneeSteps {
		ph[i] = harness.Phase{Name: fmt.Sprintf("%.2fC", k), Duration: kneeStep, Rate: k * c}
	}
	rng := rand.New(rand.NewPCG(o.seed, 0xca9))
	arrivals := harness.Arrivals(rng, ph)
	clock := simclient.NewClock(o.scale)
	caller := simclient.NewCaller(srv.URL()+"/v1/completions", engineKey, clock, simclient.RetryPolicy{}, o.seed)
	defer caller.CloseIdle()

	// Snapshot the engine at every step boundary.
	snaps := make([]enginesim.Stats, len(kneeSteps)+1)
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for i := range snaps {
			if !clock.SleepUntil(ctx, harness.PhaseStart(append(ph, harness.Phase{}), i)) {
				return
			}
			snaps[i] = srv.Engine.Stats()
		}
	})
	var calls sync.WaitGroup
	for _, ar := range arrivals {
		if !clock.SleepUntil(ctx, ar.At) {
			break
		}
		body := workload(rng).Body("sim-llama-8b", false)
		calls.Go(func() { caller.Do(ctx, simclient.Request{Body: body}) })
	}
	sampler.Wait()
	// The calls still queued are not needed: stop them with the engine.
	cancel()
	calls.Wait()
	if err := parent.Err(); err != nil {
		return "", fmt.Errorf("capacity check: %w", err)
	}

	var steps []string
	growsAt := -1.0
	for i, k := range kneeSteps {
		a, b := snaps[i], snaps[i+1]
		dw := (b.Waiting + b.Pending) - (a.Waiting + a.Pending)
		steps = append(steps, fmt.Sprintf("%.1fC: waiting %+d", k, dw))
		if growsAt < 0 && dw >= 10 && b.Waiting+b.Pending >= 10 {
			growsAt = k
		}
	}
	// Completions per engine second over the overloaded steps, once the
	// batch is full: the throughput a saturated engine sustains.
	first := len(kneeSteps) - 2
	a, b := snaps[first], snaps[len(snaps)-1]
	live := float64(b.Completed-a.Completed) / (b.EngineTime - a.EngineTime).Seconds()
	verdict := "the waiting queue never grew"
	if growsAt > 0 {
		verdict = fmt.Sprintf("the waiting queue first grows at %.1f C", growsAt)
	}
	return fmt.Sprintf("%s (%s per %v); completions while overloaded %.3f calls/s = %.2f C",
		verdict, strings.Join(steps, ", "), kneeStep, live, live/c), nil
}
