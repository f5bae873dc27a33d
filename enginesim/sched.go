package enginesim

import (
	"container/list"
	"sync"
	"time"
)

type reqState int

const (
	stateNew reqState = iota
	stateWaiting
	stateRunning
	stateDone
)

// request is one generation call. The scheduler fields are owned by the
// engine core (under Engine.mu); the out* fields are what the HTTP handler
// reads, under their own mutex so a slow client never holds up the core.
type request struct {
	id           string
	prompt       int    // prompt tokens
	prefixID     string // shared prefix identity for the prefix cache
	prefixTokens int
	target       int    // output tokens to produce
	reason       string // finish reason when target is reached
	arrival      time.Duration
	rank         int // the data-parallel rank it was dispatched to

	state     reqState
	computed  int // prompt tokens in the KV cache (cached + prefilled)
	generated int
	reserved  int // KV tokens reserved at admission (Preempt: held)
	// resumed is what it had generated when last preempted (Preempt): its
	// recompute prefills prompt+resumed tokens and emits no first token.
	resumed    int
	admittedAt time.Duration
	aborted    bool // client left: paid for one more step, then removed
	steps      int  // steps that included it (tests)

	out       sync.Mutex
	outGen    int
	outDone   bool
	outReason string
	notify    chan struct{} // cap 1; poked on every change of the out* fields
}

func newRequest(id string, prompt, prefixTokens int, prefixID string, target int, reason string) *request {
	return &request{id: id, prompt: prompt, prefixTokens: prefixTokens, prefixID: prefixID,
		target: target, reason: reason, notify: make(chan struct{}, 1)}
}

// publish copies progress to the handler side and wakes it without blocking.
func (r *request) publish(done bool, reason string) {
	r.out.Lock()
	r.outGen = r.generated
	if done {
		r.outDone, r.outReason = true, reason
	}
	r.out.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *request) snapshot() (gen int, done bool, reason string) {
	r.out.Lock()
	defer r.out.Unlock()
	return r.outGen, r.outDone, r.outReason
}

// batchEntry is one request's share of a step: n prompt tokens to prefill,
// or one decode token.
type batchEntry struct {
	r       *request
	n       int
	prefill bool
}

type batch struct {
	entries        []batchEntry
	prefillTokens  int
	decodeSeqs     int
	contextTokens  int // KV tokens the decodes attend to
	scheduledTotal int
}

// counters the core keeps for Stats.
type counters struct {
	admitted, completed, aborted uint64
	steps                        uint64
	promptTokens, genTokens      uint64
	prefillTokens                uint64
	preemptions                  uint64
	maxRunning                   int
	busy                         time.Duration // engine time spent stepping
}

// sched is the engine core's state: a pure, clock-free scheduler. schedule
// picks the next step, cost prices it, complete applies it at a given engine
// time. Tests drive it by hand; the Engine drives it from its loop.
type sched struct {
	cfg     Config
	m       *metrics
	waiting []*request
	running []*request
	kvUsed  int // reserved tokens
	prefix  *lru
	c       counters
	// stallDecode models a stuck decode (pipeline stage, KV transfer):
	// prefills and admissions go on, no running request gets a decode step.
	stallDecode bool
}

func newSched(cfg Config, m *metrics) *sched {
	return &sched{cfg: cfg, m: m, prefix: newLRU(cfg.PrefixCacheSize)}
}

func (s *sched) idle() bool { return len(s.waiting) == 0 && len(s.running) == 0 }

// add queues an arrived request at the back of the FCFS waiting queue.
func (s *sched) add(r *request) {
	r.state = stateWaiting
	s.waiting = append(s.waiting, r)
}

// abort handles a client that went away. A waiting request leaves at once;
// a running one is marked and still rides (and is paid for) in the next
// step, which together with the step in flight when the client left makes at
// most two paid steps, like vLLM's asynchronously issued steps.
func (s *sched) abort(r *request, now time.Duration) {
	switch r.state {
	case stateWaiting:
		for i, w := range s.waiting {
			if w == r {
				s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
				break
			}
		}
		s.finish(r, reasonAbort, now)
	case stateRunning:
		r.aborted = true
	}
}

// schedule builds the next step: running requests first (decodes one token
// each, unfinished prefills take what budget is left, in admission order),
// then admissions from the head of the waiting queue while there are seats,
// budget and KV room. A prompt longer than the remaining budget is prefilled
// in chunks over several steps. While decode is stalled, requests past
// their prefill are skipped (they keep their seats and KV), and those whose
// client left are dropped at once: no step will ever carry them again.
func (s *sched) schedule(now time.Duration) batch {
	var b batch
	budget := s.cfg.StepTokens
	if s.stallDecode {
		s.dropStalledAborts(now)
	}
	preempted := false
	if s.cfg.Preempt {
		preempted = s.preempt()
	}
	for _, r := range s.running {
		if budget == 0 {
			break
		}
		if s.stallDecode && r.computed >= r.fill() {
			continue
		}
		if r.computed < r.fill() {
			n := min(r.fill()-r.computed, budget)
			b.entries = append(b.entries, batchEntry{r: r, n: n, prefill: true})
			b.prefillTokens += n
			budget -= n
		} else {
			b.entries = append(b.entries, batchEntry{r: r, n: 1})
			b.decodeSeqs++
			b.contextTokens += r.prompt + r.generated
			budget--
		}
	}
	// As vLLM's scheduler, no admission in a step that preempted.
	for !preempted && len(s.waiting) > 0 && len(s.running) < s.cfg.MaxNumSeqs && budget > 0 {
		r := s.waiting[0]
		hit := 0
		if r.prefixID != "" && r.prefixTokens > 0 && s.prefix.touch(r.prefixID, false) {
			hit = r.prefixTokens
		}
		// As in vLLM, the last prompt token is always computed so that the
		// step has logits to sample from.
		hit = min(hit, r.prompt-1)
		need := r.prompt - hit + r.target
		if s.cfg.Preempt {
			need = r.fill() - hit
		}
		if len(s.running) > 0 && s.kvUsed+need > s.cfg.KVCacheTokens {
			break // FCFS: nobody overtakes the head
		}
		s.waiting = s.waiting[1:]
		// vLLM records prefix-cache queries and hits when a request is
		// scheduled from waiting, long before any prompt token is counted.
		s.m.prefixQueries.Add(float64(r.fill()))
		s.m.prefixHits.Add(float64(hit))
		r.state = stateRunning
		r.computed = hit
		r.reserved = need
		if r.resumed == 0 {
			r.admittedAt = now
		}
		s.kvUsed += need
		s.running = append(s.running, r)
		s.c.admitted++
		n := min(r.fill()-r.computed, budget)
		b.entries = append(b.entries, batchEntry{r: r, n: n, prefill: true})
		b.prefillTokens += n
		budget -= n
	}
	s.c.maxRunning = max(s.c.maxRunning, len(s.running))
	b.scheduledTotal = s.cfg.StepTokens - budget
	if len(b.entries) > 0 {
		// Aborted requests beyond this step are removed in complete, but the
		// gauges should show the step as scheduled.
		s.setGauges()
	}
	return b
}

// fill is the tokens a request prefills before it decodes: its prompt, and
// after a preemption what it had generated too.
func (r *request) fill() int { return r.prompt + r.resumed }

// preempt frees the KV cache of the newest running requests, as vLLM's
// scheduler does when a step's decodes find no free block, until every
// running request past its prefill has room for its next token. A
// preempted request goes back to the head of the waiting queue and, when
// admitted again, recomputes its prompt and what it had generated. It
// reports whether it preempted any.
func (s *sched) preempt() bool {
	n := s.c.preemptions
	decoding := 0
	for _, r := range s.running {
		if r.computed >= r.fill() && !s.stallDecode {
			decoding++
		}
	}
	for len(s.running) > 1 && s.kvUsed+decoding > s.cfg.KVCacheTokens {
		r := s.running[len(s.running)-1]
		s.running[len(s.running)-1] = nil
		s.running = s.running[:len(s.running)-1]
		if r.computed >= r.fill() && !s.stallDecode {
			decoding--
		}
		s.kvUsed -= r.reserved
		r.reserved, r.computed = 0, 0
		r.resumed = r.generated
		r.state = stateWaiting
		s.waiting = append([]*request{r}, s.waiting...)
		s.m.preemptions.Inc()
		s.c.preemptions++
	}
	return s.c.preemptions > n
}

// dropStalledAborts finishes the aborted requests that wait on a stalled
// decode. Without a step to ride in, vLLM's scheduler frees them when it
// processes the abort; so does this.
func (s *sched) dropStalledAborts(now time.Duration) {
	kept := s.running[:0]
	for _, r := range s.running {
		if r.aborted && r.computed >= r.fill() {
			s.finish(r, reasonAbort, now)
			continue
		}
		kept = append(kept, r)
	}
	if len(kept) == len(s.running) {
		return
	}
	clear(s.running[len(kept):])
	s.running = kept
	s.setGauges()
}

// cost prices a step in engine time.
func (s *sched) cost(b batch) time.Duration {
	return s.cfg.StepOverhead + time.Duration(b.prefillTokens)*s.cfg.PrefillTokenCost +
		time.Duration(len(b.entries))*s.cfg.SeqCost + time.Duration(b.contextTokens)*s.cfg.ContextTokenCost
}

// complete applies a step that ended at engine time now, with vLLM's
// recording rules: the whole prompt is counted in prompt_tokens_total when
// the request produces its first output token; each output token counts in
// generation_tokens_total; one iteration_tokens_total observation per step
// whose value is the prompt plus generation tokens counted in that step (so
// its _sum equals prompt_tokens_total + generation_tokens_total, as in a real
// scrape). Outputs of aborted requests are dropped, as vLLM's output
// processor drops them, so they move no token counter.
func (s *sched) complete(b batch, now time.Duration) {
	s.c.steps++
	stepTokens := 0
	for _, e := range b.entries {
		r := e.r
		r.steps++
		produced := false
		if e.prefill {
			r.computed += e.n
			s.c.prefillTokens += uint64(e.n)
			if r.computed >= r.fill() && r.resumed > 0 {
				// A recomputed request: its next token, no first token.
				r.generated++
				produced = true
				s.kvGrow(r)
			} else if r.computed >= r.prompt {
				r.generated++
				produced = true
				s.kvGrow(r)
				if !r.aborted {
					s.m.promptTokens.Add(float64(r.prompt))
					s.c.promptTokens += uint64(r.prompt)
					s.m.ttft.Observe(since(now, r.arrival))
					s.m.prefill.Observe(since(now, r.admittedAt))
					stepTokens += r.prompt
				}
			}
			if r.prefixID != "" && r.prefixTokens > 0 && r.computed >= r.prefixTokens {
				s.prefix.touch(r.prefixID, true)
			}
		} else {
			r.generated++
			produced = true
			s.kvGrow(r)
		}
		if r.aborted {
			continue
		}
		if produced {
			s.m.genTokens.Inc()
			s.c.genTokens++
			stepTokens++
			if r.generated >= r.target {
				s.finish(r, r.reason, now)
			} else {
				r.publish(false, "")
			}
		}
	}
	s.m.iterTokens.Observe(float64(stepTokens))
	kept := s.running[:0]
	for _, r := range s.running {
		switch {
		case r.state == stateDone:
		case r.aborted:
			s.finish(r, reasonAbort, now)
		default:
			kept = append(kept, r)
		}
	}
	clear(s.running[len(kept):])
	s.running = kept
	s.setGauges()
}

// kvGrow holds one more KV token for a token r generated (Preempt).
func (s *sched) kvGrow(r *request) {
	if s.cfg.Preempt {
		r.reserved++
		s.kvUsed++
	}
}

func (s *sched) finish(r *request, reason string, now time.Duration) {
	if r.state == stateRunning {
		s.kvUsed -= r.reserved
		s.m.queue.Observe(since(r.admittedAt, r.arrival))
	}
	r.state = stateDone
	s.m.success.WithLabelValues(reason).Inc()
	s.m.e2e.Observe(since(now, r.arrival))
	if reason == reasonAbort {
		s.c.aborted++
	} else {
		s.c.completed++
	}
	r.publish(true, reason)
}

// since is now-t in seconds, never negative: a core catching up on its step
// schedule may stamp a step's end a little before a late arrival.
func since(now, t time.Duration) float64 { return max(0, (now - t).Seconds()) }

// setGauges publishes queue depths and KV usage (tokens actually held:
// uncached prompt computed so far plus generated tokens).
func (s *sched) setGauges() {
	s.m.running.Set(float64(len(s.running)))
	s.m.waiting.Set(float64(len(s.waiting)))
	s.m.waitingCapacity.Set(float64(len(s.waiting)))
	used := 0
	for _, r := range s.running {
		used += r.computed + r.generated
	}
	s.m.kvUsage.Set(min(1, float64(used)/float64(s.cfg.KVCacheTokens)))
}

// lru is a bounded set of prefix ids, least recently used evicted first.
type lru struct {
	max   int
	order *list.List
	items map[string]*list.Element
}

func newLRU(n int) *lru { return &lru{max: n, order: list.New(), items: map[string]*list.Element{}} }

// touch reports whether id is cached and refreshes it; insert adds it when
// missing.
func (l *lru) touch(id string, insert bool) bool {
	if el, ok := l.items[id]; ok {
		l.order.MoveToFront(el)
		return true
	}
	if insert && l.max > 0 {
		l.items[id] = l.order.PushFront(id)
		if l.order.Len() > l.max {
			last := l.order.Back()
			l.order.Remove(last)
			delete(l.items, last.Value.(string))
		}
	}
	return false
}
