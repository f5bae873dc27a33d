// Package enginesim is a time-scaled simulated vLLM engine, with fault
// injection, that behaves like vLLM's OpenAI-compatible server wherever a
// watchdog or an admission limiter looks.
//
// # What it models
//
// One engine core goroutine steps a scheduler (sched, a pure state machine
// tests drive by hand): continuous batching up to MaxNumSeqs sequences, a
// per-step token budget (StepTokens, 8192) shared by one decode token per
// running sequence and chunked prefill, a FCFS waiting queue, a prefix cache
// (LRU by prefix id: tokens of a prefix seen before need no prefill) and a
// KV-cache capacity in tokens (a request reserves its uncached prompt and
// its output at admission; when that does not fit, it and everything behind
// it wait, so the engine never preempts; with Preempt it takes the cache as
// vLLM's v1 scheduler does and preempts the newest when decodes do not
// fit).
//
// With DataParallel N > 1 there are N such cores (ranks), each with its own
// scheduler, KV cache, step loop and series, as vLLM data parallel: every
// per-engine series carries engine="0".."N-1", all in the one exposition
// (each family once, in vLLM's order, with every rank's series under its
// HELP/TYPE header). Requests are dealt to the ranks round-robin. vLLM's DP
// coordinator balances by load instead; round-robin keeps sending a hung
// rank its share, which then waits forever, and that stuck share is the
// partial failure a watchdog has to see. MaxNumSeqs, StepTokens, the KV
// cache and the prefix cache are per rank; Stats sums the ranks and lists
// each in Ranks. With one rank the exposition is byte for byte what it was
// before ranks existed.
//
// Metrics carry vLLM v1's names, HELP texts, labels (engine="0",
// model_name) and recording rules, which is what a watchdog depends on: the
// whole prompt enters vllm:prompt_tokens_total only when the request
// produces its first token (a long chunked prefill moves no token counter
// for several steps); vllm:prefix_cache_queries_total and _hits_total move
// when a request is admitted from waiting; vllm:iteration_tokens_total gets
// one observation per step (its _count is the per-step heartbeat, its _sum
// equals prompt + generation tokens as in a real scrape). The core alone
// writes metrics and gauges, so a hang freezes all of them while /v1/models,
// /health and /metrics keep answering.
//
// A client that disconnects is aborted (AbortOnDisconnect, default on): the
// core sees the abort at its next scheduling, keeps the request in that one
// step, then drops it: it is paid for in at most two steps after the
// disconnect (the one in flight and the next, as vLLM's asynchronously issued
// steps); their outputs are discarded and move no token counter. With
// abort off the request runs to completion for nobody, which is what lets a
// retry storm collapse an engine.
//
// # Time and cost model
//
// Engine time runs Scale times faster than wall time; every figure the
// engine reports (histograms, Stats) is engine time. A step costs
//
//	StepOverhead + prefill tokens × PrefillTokenCost + sequences × SeqCost
//
// with defaults 10 ms, 31.4 µs and 0.1 ms: idle, a 12,000-token prompt
// (2,000 of them a cached prefix) has a first token after ~0.33 s and a
// 300-token answer after ~3.4 s; saturated, ~240 sequences decode beside
// one chunked prefill in ~0.28 s steps and a call takes ~90 s.
//
// Measured capacity of the defaults (MeasureCapacity, TestDefaultCapacity):
// 2.80 completed calls/s (2.803) of 12,000-token prompts sharing a
// 2,000-token prefix with 300-token answers, at steady state. Served over
// HTTP by 300 closed-loop clients the live engine measured 2.805 calls/s at
// Scale 100, 2.806 at 500 and 2.77 at 2000 (on 2 CPUs): the core keeps to
// its step schedule up to a few thousand times real time.
//
// Deliver drives the scheduler the same way, offline, behind an admission
// in front of the engine, for a burst of calls whose clients' timeout covers
// the whole call; BestDelivered searches a family of clairvoyant admissions
// for the most such calls answered in time: what the best admission could
// deliver, measured rather than argued.
//
// # Faults
//
// As methods and on ControlHandler:
//
//   - Hang: every core stops stepping (the step in flight never completes);
//     HangRank(n): rank n alone does, the others keep serving.
//   - StallDecode: a stuck decode (pipeline stage, KV transfer): admission
//     and prefill go on, so every new request gets its first token, counted
//     by vLLM's rules (its prompt in prompt_tokens_total, one token in
//     generation_tokens_total, one time_to_first_token_seconds observation),
//     but none gets a second; max_tokens 1 still completes. Once every seat
//     waits on decode the core sleeps until something changes: the
//     iteration heartbeat moves only while something prefills.
//   - Wedge: the API server accepts connections and answers nothing, on any
//     endpoint, until the client gives up or the wedge is cleared (held
//     requests are then served). The cores go on; the control port answers.
//   - StarveAPI(d): every new API request waits d of wall time before it
//     is served, requests under way go on: an API server starved under
//     load, which answers patient clients and times out impatient ones.
//   - FailEndpoint(path, code): that endpoint answers code with an
//     OpenAI-shaped error while the rest serve; several may fail at once.
//   - Slow (steps cost N times more), Clear (lifts all of the above), and
//     Crash (the cores die: /health 503, Server closes its ports, vllm-sim
//     exits 1).
//
// Stats.Fault names the faults in force, joined by "+" (e.g.
// "hang-rank-1+error /v1/models 503"). Server honours LoadTime: the API port
// refuses connections until the engine has "loaded".
package enginesim
