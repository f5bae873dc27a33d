package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/admission"
	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/configs/haproxy"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/simclient"
)

// routing is how calls reach the nodes.
type routing int

const (
	// direct: one node, the client talks to its limiter (metastable's
	// vigil arm).
	direct routing = iota
	// roundRobin: HAProxy with the shipped file's balance replaced by
	// round-robin (the control).
	roundRobin
	// keyAffine: HAProxy with the shipped file as it is.
	keyAffine
)

// arm is one way of serving the calls.
type arm struct {
	name, what string
	routing    routing
}

var arms = []arm{
	{name: "single", what: "one node, no HAProxy, 1/N of the load: metastable's vigil arm", routing: direct},
	{name: "round-robin", what: "pool.cfg with balance roundrobin", routing: roundRobin},
	{name: "key-affine", what: "pool.cfg as shipped: balance hdr(Idempotency-Key), hash-type consistent", routing: keyAffine},
}

func armNames() []string {
	var n []string
	for _, a := range arms {
		n = append(n, a.name)
	}
	return n
}

func parseArms(s string) ([]arm, error) {
	var out []arm
	for _, name := range strings.Split(s, ",") {
		found := false
		for _, a := range arms {
			if a.name == name {
				out, found = append(out, a), true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown arm %q (have %s)", name, strings.Join(armNames(), ", "))
		}
	}
	return out, nil
}

// poolConfig is the HAProxy configuration of a pool arm: the shipped
// configs/haproxy/pool.cfg with the socket, frontend and servers filled in
// (servers node1..nodeN at addrs), and for round-robin its balance line
// replaced. Everything else, timeouts, retries and health checks included,
// is the shipped file.
func poolConfig(r routing, socket, bind string, addrs []string) (string, error) {
	if r == direct {
		return "", fmt.Errorf("pool config: the direct arm has no HAProxy")
	}
	var servers []haproxy.Server
	for i, a := range addrs {
		servers = append(servers, haproxy.Server{Name: nodeName(i), Addr: a})
	}
	return haproxy.Render(haproxy.Options{Socket: socket, Bind: bind, Servers: servers, RoundRobin: r == roundRobin})
}

func nodeName(i int) string { return fmt.Sprintf("node%d", i+1) }

// snapshot is every engine's and limiter's counters at one engine time.
type snapshot struct {
	engines  []enginesim.Stats
	limiters []admission.Stats
}

type armResult struct {
	arm   arm
	nodes int
	calls []simclient.Result
	phase []int
	// hold0 and hold1 are the nodes at the hold's start and end; end when
	// every call has ended.
	hold0, hold1, end snapshot
	// servers is HAProxy's "show stat" per server at the end (pool arms).
	servers map[string]map[string]string
	wall    time.Duration
	f       figures
}

func runArm(ctx context.Context, o options, a arm, c float64) (armResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := o.nodes
	if a.routing == direct {
		n = 1
	}
	var engines []*enginesim.Server
	var lims []*harness.Limiter
	defer func() {
		for _, l := range lims {
			l.Close()
		}
		for _, e := range engines {
			e.Close()
		}
	}()
	var addrs []string
	for range n {
		srv, err := enginesim.Start(ctx, "127.0.0.1:0", harness.PaperEngineConfig(o.scale, true, engineKey))
		if err != nil {
			return armResult{}, fmt.Errorf("start engine: %w", err)
		}
		engines = append(engines, srv)
		<-srv.Ready()
		// Each node's limiter is metastable's vigil arm: the defaults.
		lim, err := harness.StartLimiter(ctx, configs.Default().Admission, srv.URL(), engineKey, o.scale, o.limiterTime)
		if err != nil {
			return armResult{}, err
		}
		lims = append(lims, lim)
		addrs = append(addrs, strings.TrimPrefix(lim.URL(), "http://"))
	}
	target := lims[0].URL()
	var hp *harness.HAProxy
	if a.routing != direct {
		var err error
		hp, err = harness.StartHAProxyText(ctx, func(socket, bind string) (string, error) {
			return poolConfig(a.routing, socket, bind, addrs)
		})
		if err != nil {
			return armResult{}, err
		}
		defer hp.Close()
		var names []string
		for i := range n {
			names = append(names, nodeName(i))
		}
		if err := hp.WaitServersUp(ctx, haproxy.Backend, names, 10*time.Second); err != nil {
			return armResult{}, err
		}
		target = hp.URL()
	}

	ph := harness.PaperPhases(float64(n)*c, o.hold)
	arrivals, bodies := harness.PaperCalls(o.seed, ph)
	clock := simclient.NewClock(o.scale)
	caller := simclient.NewCaller(target+"/v1/completions", clientKey, clock, harness.PaperPolicy(), o.seed)
	caller.HeaderScale = lims[0].HeaderScale()
	defer caller.CloseIdle()

	res := armResult{arm: a, nodes: n}
	for _, ar := range arrivals {
		res.phase = append(res.phase, ar.Phase)
	}
	snap := func() snapshot {
		var s snapshot
		for i := range engines {
			s.engines = append(s.engines, engines[i].Engine.Stats())
			s.limiters = append(s.limiters, lims[i].Stats())
		}
		return s
	}
	holdStart := harness.PhaseStart(ph, harness.PhaseHold)
	holdEnd := holdStart + o.hold
	sctx, stopSampler := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Go(func() {
		if clock.SleepUntil(sctx, holdStart) {
			res.hold0 = snap()
		}
		if clock.SleepUntil(sctx, holdEnd) {
			res.hold1 = snap()
		}
	})
	start := time.Now()
	res.calls = harness.SendAll(ctx, clock, caller, o.seed, arrivals, bodies)
	res.wall = time.Since(start)
	// The hold's own arrivals run to its end, so the calls cannot finish
	// first; wait all the same rather than read a missing snapshot.
	clock.SleepUntil(ctx, holdEnd)
	sampler.Wait()
	stopSampler()
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.end = snap()
	if hp != nil {
		st, err := hp.ServerStats(ctx, haproxy.Backend)
		if err != nil {
			return res, err
		}
		res.servers = st
	}
	res.f = measure(res, c, o.hold)
	return res, nil
}
