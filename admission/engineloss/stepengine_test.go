package engineloss

import (
	"math/rand/v2"
	"slices"
	"time"
)

// stepEngine is an engine of steps as vLLM schedules them (chunked
// prefill): each step decodes one token of every running call and
// prefills waiting prompts, oldest first, within a token budget, and
// costs overhead + prefill tokens x prefillCost + running calls x
// seqCost. A step that carries a prompt's prefill is long, and every
// stream running beside it waits for it: on a slow model, many times its
// decode step. It gives the byte times the stall watch sees of each call.
type stepEngine struct {
	overhead, prefillCost, seqCost time.Duration
	budget, seats                  int
}

// slowModel is enginesim's default cost model slowed by f (bench/goodput's
// slow10 and slow20: f 10 and 20).
func slowModel(f int) stepEngine {
	d := time.Duration(f)
	return stepEngine{overhead: 10 * time.Millisecond * d, prefillCost: 31400 * time.Nanosecond * d,
		seqCost: 100 * time.Microsecond * d, budget: 8192, seats: 256}
}

// closedLoad keeps inFlight calls in flight (a limiter at its cap: a new
// call is sent the moment one ends) until `until`. prompt: the tokens the
// engine prefills; told: what the limiter estimates of them (the watch's
// view; a client whose body does not show its prompt is sized wrong);
// outputs vary about output (log-normal, as bench/goodput's).
type closedLoad struct {
	inFlight, prompt, told, output int
	stream                         bool
	until                          time.Duration
}

type engineCall struct {
	c              int // index in the calls
	prompt, output int
	computed, made int
}

// run plays ld on the engine until ld.until, or until stop (0: never)
// when it hangs: no step ends from then on, and the calls in flight stay
// open. It returns the calls as the watch sees them.
func (e stepEngine) run(ld closedLoad, seed uint64, stop time.Duration) []simCall {
	rng := rand.New(rand.NewPCG(seed, 1))
	var calls []simCall
	var waiting, running []*engineCall
	send := func(at time.Duration) {
		out := max(4, int(float64(ld.output)*(0.4+1.2*rng.Float64())))
		calls = append(calls, simCall{sent: at, prompt: ld.told, output: out, stream: ld.stream, open: true})
		waiting = append(waiting, &engineCall{c: len(calls) - 1, prompt: ld.prompt, output: out})
	}
	for range ld.inFlight {
		send(0)
	}
	for now := time.Duration(0); now < ld.until; {
		budget, prefill := e.budget, 0
		var stepped []*engineCall
		for _, r := range running {
			if budget == 0 {
				break
			}
			n := 1
			if r.computed < r.prompt {
				n = min(r.prompt-r.computed, budget)
				prefill += n
			}
			r.computed += n
			budget -= n
			stepped = append(stepped, r)
		}
		for len(waiting) > 0 && len(running) < e.seats && budget > 0 {
			r := waiting[0]
			waiting = waiting[1:]
			running = append(running, r)
			n := min(r.prompt, budget)
			r.computed += n
			budget -= n
			prefill += n
			stepped = append(stepped, r)
		}
		now += e.overhead + time.Duration(prefill)*e.prefillCost + time.Duration(len(running))*e.seqCost
		if stop > 0 && now >= stop {
			break
		}
		ended := 0
		for _, r := range stepped {
			if r.computed < r.prompt {
				continue // still prefilling: no token yet
			}
			r.made++
			c := &calls[r.c]
			if ld.stream || r.made == r.output {
				c.bytes = append(c.bytes, now)
			}
			if r.made == r.output {
				c.open = false
				ended++
			}
		}
		running = slices.DeleteFunc(running, func(r *engineCall) bool { return r.made == r.output })
		for range ended {
			send(now)
		}
	}
	return calls
}
