// Package core decides admission for vigil's limiter, whatever transport
// carries the requests: which request gets one of the in-flight cap's
// slots now, which waits in the queue and for how long, and which is
// turned away, with the delay after which a retry can succeed. Package
// admission is its HTTP client (the reverse proxy in front of the engine):
// it reads a request's facts into a Request, and answers a Rejection as an
// OpenAI-shaped 429 or 503.
//
// # The API
//
// Limiter.Acquire(ctx, Request) returns a Listener (the slot), a Rejection
// (Reason, an honest Wait, Final when a retry cannot help) or
// ErrClientGone when ctx ended while the request waited. The Listener ends
// the slot exactly once: Ignore when the request never reached the engine
// (the slot and the quota charges are given back), Release(Outcome) when
// it did (success, dropped by the engine, or cancelled; its tokens);
// FirstToken reports a streamed answer's time to first token on the way.
// The cap comes from a Limit: the automatic cap (NewAuto, the default) or
// a fixed one (NewFixed; max_in_flight > 0, or an override); what the
// Listener reports is what a Learner among them learns from. This is
// go-concurrency-limits' shape (Acquire, a Listener's OnSuccess, OnIgnore
// and OnDropped, a pluggable limit algorithm), with the queue, quotas and
// budget an LLM engine's clients need.
//
// # What decides
//
// Acquire applies, in order:
//
//  1. Recovery: while the engine restarts (SetRecovering) everything is
//     turned away (ReasonRecovering, 30 s).
//  2. Tenants (Request.Tenant: the hash of the client's key): rpm, tpm and
//     max_in_flight per key; over them, a rate-limit rejection (429). Tokens
//     are charged at admission (Request.Tokens, the transport's estimate)
//     and corrected from the answer's usage (Outcome.TotalTokens). A
//     request larger than the key's whole tpm is rejected as Final.
//     A tenant's in-flight count includes its queued requests.
//  3. Retry budget: an attempt is a retry when its transport says so
//     (Request.Retry: the SDK marks it, or its call key was seen before). A
//     retry amplifies work only if it would start a second execution of its
//     call, so a retry whose call was only ever turned away
//     (Request.NeverExecuted) is neither budgeted nor counted as a first
//     attempt. Budgeted retries may number retry_ratio of first attempts
//     over retry_window (at least 5 per window, so a quiet system can still
//     retry); beyond that, 429, but only while the engine is behind: the
//     calls ahead would not be served within the retry's queue bound (or
//     its client's timeout is unknown).
//  4. The in-flight cap: a free slot admits at once; otherwise the request
//     waits in a queue bounded by max_queue, max_queue_bytes (the bodies it
//     holds) and max_queue_wait, cut to half the client's timeout
//     (Request.Timeout; 97% of it for a coalesced keyed call, which loses nothing by being
//     admitted late: its execution outlives the attempt, and a 503 with a
//     Retry-After just before the client's own timeout stretches the call's
//     life more than the SDK's short backoff would). newest_first (the
//     default) serves the oldest first attempt still on time while the
//     queue drains within its clients' timeouts, else first attempts newest
//     first (the oldest first attempt's client is about to give up), then
//     retries oldest call first
//     (their clients missed their first deadline already; the oldest call
//     has the fewest attempts left), so retries never displace fresh work;
//     when the queue is full it turns away the oldest waiter; fifo
//     turns away the newcomer. Full or expired: 503. An unkeyed waiter whose
//     client leaves is removed at once. A keyed waiter's place outlives its
//     attempt, as its execution would: when its client leaves, or its wait
//     expires, the place is kept as a placeholder for cancel_after (plus
//     the Retry-After it was given), and a retry of the same call takes it
//     over; otherwise it is dropped. A placeholder holds no body, is never
//     admitted and never counts in flight. So a call queued through an
//     overload keeps its turn across its attempts, while newest_first keeps
//     fresh calls on time.
//
// Streams: a streamed request's first token is worth little once its
// client stops waiting for it, so its queue wait is bounded by half its
// client's announced timeout when there is one, otherwise by
// stream_queue_wait (0: ttft_target less the engine's typical time to
// first token, at least a tenth of the target, else 10 s; and half an inferred
// timeout when shorter). When the queue would not reach it within that
// bound, it is turned away at once (ReasonStreamDeadline, 503) instead of
// queueing only to be turned away later: the estimate is its position over
// the measured drain rate (admissions a second over the last 10 s, or since
// the engine was last idle, at least a second). Its position: fifo, every
// live waiter; newest_first, none for a first attempt (it is served next;
// if newer ones overtake it, its wait ends at the bound), every live
// waiter for a retry. Unary calls keep the queue as above.
//
// # Deadlines
//
// Not every client announces its timeout: the OpenAI Node SDK sends
// X-Stainless-Timeout only with a per-request timeout, none with the usual
// client-level one, and plain HTTP clients send nothing.
// When a request announces none, its client's timeout is inferred (in
// order): the tenant's client_timeout, the route's (client_timeouts), or
// the route's learned one: the median of its clients' last 16 give-ups,
// from 3 on, as the transport reports them with GaveUp (a client that
// left before its answer began: at once without an idempotency key, or
// once a retry of the same key confirms it timed out rather than
// cancelled). An inferred timeout is used wherever an announced one is:
// the queue wait cut to half of it (97% for a coalesced keyed call), and
// the automatic cap's deadline ceiling for plain answers.
//
// Every Rejection's Wait is the queue ahead divided by the measured
// completion rate (answers per second over the last 10 s), or the quota's
// own refill time; the transport caps it at MaxRetryAfter.
//
// # The cap needs no tuning
//
// max_in_flight 0 (the default) derives the cap from the engine and from
// the clients' own deadlines; there is no capacity figure to measure or
// guess. The automatic cap is the most work the engine runs at once without
// queueing it, kept within what the clients wait for: the timeout each
// announces for a plain answer, the TTFT objective (ttft_target, default
// 2 s, the latency promised to clients, not a capacity) for a streamed one.
// Anything beyond waits in vigil's queue instead of the engine's: bounded,
// fresh work first, dropped when its client leaves, answered with an honest
// Retry-After.
//
// Why these signals. A continuous-batching engine (vLLM) starts every
// request it has room for at once, so its own waiting gauge
// (vllm:num_requests_waiting, read from its /metrics four times a second
// while requests are in flight) counts the work the cap let in beyond the
// engine's batch or KV capacity. With chunked prefill a long prompt or two
// always waits a step for the step's token budget: that is the engine at
// full use, not a queue; and with prompts of 8k tokens and more, many wait
// their turn while the engine still has seats and KV cache for them
// (prefill.go: counted as a prefill backlog up to the free seats, from the
// engine's KV usage, its batch against engine_max_seqs and its prefill
// counters). By Little's law waiting/running is the time a
// request waits over the time it runs, so for plain answers the queue counts
// once it is over 1 and over a tenth of those running; a streamed answer's
// first token waits out the whole queue, so there any queue over 1 counts.
// Below the engine's capacity latency still rises with the batch, so a
// latency-ratio limiter (Netflix-style gradient) stops far below capacity
// and throws throughput away; and no latency signal alone can tell "the
// engine is busy" from "the engine is queueing". What bounds the cap below
// capacity is what the clients wait for:
//
//   - Plain answers whose client's timeout is known (announced, e.g.
//     X-Stainless-Timeout, or inferred: see Deadlines): an answer arriving
//     after its client
//     gave up is waste, and a retry. Past the engine's knee its throughput X
//     is flat, so by Little's law an answer's time grows in proportion to
//     the N in flight (S = N/X, the tail in proportion). Each answer gives
//     its time over (its timeout x the mean N it ran beside, over its whole
//     life); the 99th percentile of the last 400 gives the ceiling: the N at
//     which the slowest 1% still arrive within their timeout. Normalised by
//     N, answers measured at any cap are comparable, so the ceiling needs no
//     step-by-step probing of a tail that shows only minutes after each
//     step. Below the knee the normalisation overstates the cost of N and
//     errs low, so only answers that ran beside at least 3/4 of the cap
//     (once they number 50) judge it and can cut it; answers from lighter
//     load only bound its growth, and while the engine's queue is empty
//     (a surge after a quiet spell) the cap may grow to twice that bound.
//     This maximises
//     throughput (a backlog drains as fast as it can) while the answers
//     still arrive in time.
//   - Streamed answers: TTFT against the objective, judged at the p90; and
//     the engine's knee by the mean service time S = N/X (from admission,
//     once the client's whole body is in, so a client sending it slowly
//     counts for nothing, to the answer's last byte), kept within three
//     times its minimum (the lowest estimate, which doubles over ten minutes
//     unless seen again, so a slower engine is relearned; an excess under
//     50 ms, less than a decode step, is no knee): two thirds of the
//     throughput ceiling; unlike a TTFT ratio it judges whole answers, which
//     a batch below the knee barely slows. The minimum is that of answers
//     of like size: an estimate whose answers are on average more than
//     twice as large or as small as those that set it (size in decode
//     steps: output tokens plus one per 256 prompt tokens, from the answer's
//     usage, else from max_tokens and the body's length) starts a new
//     minimum instead. A one-token answer takes one step whatever the load:
//     with one minimum for all sizes, a burst of them set it, every longer
//     answer after it read as past the knee, and the cap stayed at its floor
//     for the hour the minimum took to decay. A mix of chat lengths varies
//     by far less over 20 answers, so it keeps one minimum.
//
// Upstream failures (5xx, refused, reset) cut the cap too.
//
// The law (see autoLimit): evidence is gathered in windows; TTFT and
// failures count only for requests admitted after the last change, so each
// change is judged by its own effect. The engine's queue cuts the cap to
// the requests the engine runs (at most by half; set, not multiplied, as
// the queue outlasts the cut until answers free seats); a TTFT p90 over the objective cuts it
// by target/p90; a mean service time S over three times its minimum by
// 3*Smin/S (each estimate of S, every 20 answers, used once); a cap above the
// deadline ceiling to the ceiling; failures by 10% (never more than half at
// once). Otherwise, when demand filled the cap and answers are flowing, and
// the p90 and S are within 80% of their bounds, it grows: by x1.25 a window
// while probing (from the start until the engine first queues) or while a
// deadline ceiling bounds it, and otherwise by a quarter of itself per
// turnover (0.25 per answer finished), since a step's evidence arrives one
// service time later. It starts at 16 and stays within [2, 256]. Without
// readable metrics it falls back to the objectives and failures. Measured
// (bench/README.md): on streamed chat traffic it matches the best fixed cap's
// goodput; on the metastable-overload workload (plain 12k-token prompts,
// 120 s client timeouts) it runs 90-110 in flight through the backlog, where
// a rule without the deadline held 20-46.
//
// # Control
//
// The watchdog steers the limiter through a narrow surface. SetSaturated(true)
// (the engine progresses under a deep queue of its own, which the limiter's
// signal missed, e.g. traffic that bypasses it): a fixed cap admits 3/4 of
// itself, the automatic cap is cut by 1/4 once and does not grow until
// cleared; the excess waits and is shed by the bounded queue (ReasonQueueFull, ReasonQueueTimeout).
// SetRecovering(true) (restarting): every request and waiter is turned away
// for 30 s; clearing it starts SlowStart: the cap ramps from 10% to
// full over slow_start, and the automatic cap relearns its baselines.
// SetMaxInFlight and MaxInFlight serve expiring overrides (0 = automatic).
//
// Stats counts what the core decided (admitted, queued, abandoned) and
// what it holds (queue depth, held places, in flight, the cap in force).
package core
