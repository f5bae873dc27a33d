// Package core decides admission for vigil's limiter, whatever transport
// carries the requests: which request gets one of the in-flight cap's
// slots now, which waits in the queue and for how long, and which is
// turned away, with the delay after which a retry can succeed. Package
// admission is its HTTP client. The reasons behind each rule are in
// docs/design.md, section 6.
//
// # The API
//
// Limiter.Acquire(ctx, Request) returns a Listener (the slot), a Rejection
// (Reason, an honest Wait, Final when a retry cannot help) or
// ErrClientGone when ctx ended while the request waited. The Listener ends
// the slot exactly once: Ignore when the request never reached the engine
// (the slot and the quota charges are given back), Release(Outcome) when
// it did; FirstToken reports a streamed answer's time to first token on
// the way. The cap is a Limit: the automatic cap (NewAuto, the default) or
// a fixed one (NewFixed); a Limit's optional parts (EngineReader, Learner,
// Prober, FirstTokenLimiter) are called only where they exist. The
// watchdog steers it with SetSaturated, SetRecovering, SlowStart and
// SetMaxInFlight, the transport's stall watch with SetSuspected and
// Divert; ObserveEngine feeds it the engine's load; GaveUp tells it
// a client's timeout; Stats tells what it decided and holds.
//
// # What decides, in order
//
//  1. Holding: while the engine is suspected stalled (SetSuspected),
//     recovered (SetRecovering) or ramping in its slow start, nobody is
//     refused for it: no stream deadline, and a queue wait past its bound
//     goes on (to the client's announced timeout). Nothing new goes to a
//     recovered engine, nor to a suspected one when a peer can take the
//     calls (SetSuspected's stop); Divert hands the queue to the
//     transport for a peer.
//  2. Tenants: rpm, tpm and max_in_flight per key, 429 over them; a request
//     larger than the key's whole tpm is Final.
//  3. Retry budget: retries that would run a call again may be retry_ratio
//     of first attempts over retry_window (at least 5), refused beyond that
//     only while the engine is behind.
//  4. The cap: a free slot admits at once, else the bounded queue
//     (max_queue, max_queue_bytes, max_queue_wait cut to half the client's
//     timeout, 97% for a coalesced keyed call); full or expired is 503.
//  5. Order: newest_first serves the oldest first attempt still on time
//     (a plain call while its answer can make its client's timeout,
//     known or a few answers' patience),
//     else first attempts newest first, then retries oldest call first, and
//     a full queue turns away its oldest waiter; fifo serves in arrival
//     order and turns away the newcomer.
//  6. Held places: a keyed waiter whose client leaves or whose wait expires
//     keeps its place for cancel_after plus its Retry-After, for its retry.
//  7. Streams: wait at most half the client's timeout or stream_queue_wait,
//     and are turned away at once (ReasonStreamDeadline) when the queue
//     would not reach them in that time.
//  8. Deadlines: a client's timeout is announced, else the tenant's, the
//     route's, or the median of the route's last give-ups.
//  9. Wait: a rejection's Wait is the queue ahead over the measured
//     completion rate, or the quota's refill time.
//  10. The automatic cap: the most the engine runs without queueing, within
//     the clients' timeouts and the TTFT objective, probed upwards while
//     used (see autoLimit).
//  11. The first-token limit: with a TTFT objective, streams awaiting their
//     first token are bounded apart from the cap (see firstTokenGate).
//  12. Saturated: a fixed cap admits 3/4 of itself, the automatic cap is
//     cut by 1/4 once and does not grow, unless the queue is a prefill
//     backlog (see prefillMeter).
//  13. Slow start: after a restart the cap ramps from 10% to full over
//     slow_start, and the automatic cap relearns.
package core
