package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/simclient"
	"github.com/vigil-dev/vigil/util/humanize"
)

// curveLevels are the in-flight counts of the throughput curve.
var curveLevels = []int{16, 32, 64, 128, 256}

// curve measures, on a live engine, the throughput and latency the paper's
// workload gets with exactly n calls in flight (n closed-loop clients, no
// timeouts): what an in-flight cap of n lets the engine deliver.
func curve(ctx context.Context, o options, c float64, w io.Writer, stderr io.Writer) error {
	t := humanize.Table{Header: []string{"in flight", "calls/s", "x C", "latency p50", "latency p99"}}
	const warm, measureFor = 200 * time.Second, 400 * time.Second
	for _, n := range curveLevels {
		fmt.Fprintf(stderr, "metastable: throughput curve, %d in flight ...\n", n)
		srv, err := enginesim.Start(ctx, "127.0.0.1:0", engineConfig(o.scale, true))
		if err != nil {
			return fmt.Errorf("curve: start engine: %w", err)
		}
		<-srv.Ready()
		clock := simclient.NewClock(o.scale)
		caller := simclient.NewCaller(srv.URL()+"/v1/completions", engineKey, clock, simclient.RetryPolicy{}, o.seed)
		cctx, cancel := context.WithCancel(ctx)
		var mu sync.Mutex
		var lat []time.Duration
		measuring := false
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(o.seed, uint64(i)))
				for cctx.Err() == nil {
					r := caller.Do(cctx, simclient.Request{Body: workload(rng).Body("sim-llama-8b", false)})
					mu.Lock()
					if r.Delivered && measuring {
						lat = append(lat, r.End-r.Start)
					}
					mu.Unlock()
				}
			})
		}
		clock.Sleep(cctx, warm)
		s0 := srv.Engine.Stats()
		mu.Lock()
		measuring = true
		mu.Unlock()
		clock.Sleep(cctx, measureFor)
		s1 := srv.Engine.Stats()
		cancel()
		wg.Wait()
		caller.CloseIdle()
		srv.Close()
		if err := ctx.Err(); err != nil {
			return err
		}
		x := float64(s1.Completed-s0.Completed) / (s1.EngineTime - s0.EngineTime).Seconds()
		t.Add(n, fmt.Sprintf("%.2f", x), fmt.Sprintf("%.2f", x/c),
			harness.Percentile(lat, 50).Round(time.Second), harness.Percentile(lat, 99).Round(time.Second))
	}
	fmt.Fprintf(w, "\nThroughput by in-flight count (closed loop, engine time, %v per level after %v warm-up):\n", measureFor, warm)
	t.Print(w)
	return nil
}
