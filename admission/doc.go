// Package admission is vigil's embedded limiter: a reverse proxy in front of
// the engine's OpenAI API that keeps the engine's own queue shallow, so an
// overload stays short and client retries never turn it into a metastable
// failure (DESIGN.md section 6).
//
// # Why
//
// An engine such as vLLM accepts everything and queues it. Under a short
// overload every attempt waits out its client's timeout in that queue, every
// timeout becomes a retry, and the engine ends up working for clients that
// already left: goodput collapses and stays collapsed after the overload is
// gone. Capping the work admitted restores it, and rejecting early with an
// honest Retry-After costs the client less than a timeout.
//
// # What a request goes through
//
// GET, HEAD and OPTIONS pass through uncapped (/v1/models, /health and
// /metrics always tell the truth about the engine). Every other request is
// admission-controlled, whatever its path, so no endpoint bypasses the cap:
//
//  1. Body: more than max_body_bytes is 413 at once (from Content-Length,
//     before reading); on /v1/* it must be valid JSON (400). Both carry
//     x-should-retry: false.
//  2. Coalescing, when the request carries the idempotency header (default
//     Idempotency-Key): the call key is SHA-256 of the client's key hash, the
//     header, method, path and body. An attempt whose call is running
//     attaches as another listener and gets the whole answer, a stream
//     replayed from its first byte and then live; an attempt whose call
//     finished within result_ttl gets the stored 2xx answer (LRU, bounded by
//     result_store_bytes). Neither costs a slot or quota.
//  3. Tenants (by the SHA-256 of the bearer key): rpm, tpm and max_in_flight
//     per key, 429 when over. Tokens are charged at admission (prompt bytes/4
//     plus max_tokens, 256 when absent) and corrected from the answer's usage.
//     A request larger than the key's whole tpm gets x-should-retry: false.
//     A tenant's in-flight count includes its queued requests.
//  4. Retry budget: an attempt is a retry when X-Stainless-Retry-Count > 0 or
//     its call key was seen before. A retry amplifies work only if it would
//     start a second execution of its call, so the budget charges keyed
//     retries only when an attempt of the call got an execution; a retry of
//     a call that was only ever turned away is neither budgeted nor counted
//     as a first attempt (unkeyed retries cannot be told apart: budgeted).
//     Budgeted retries may number retry_ratio of first attempts over
//     retry_window (at least 5 per window, so a quiet system can still
//     retry); beyond that, 429.
//  5. The in-flight cap: a free slot admits at once; otherwise the request
//     waits in a queue bounded by max_queue, max_queue_bytes (the bodies it
//     holds) and max_queue_wait, cut to half the client's X-Stainless-Timeout
//     (90% of it for a coalesced keyed call, which loses nothing by being
//     admitted late: its execution outlives the attempt). newest_first (the
//     default) serves the newest waiter first and, when the queue is full,
//     turns away the oldest, whose client is the closest to giving up; fifo
//     turns away the newcomer. Full or expired: 503. An unkeyed waiter whose
//     client leaves is removed at once. A keyed waiter's place outlives its
//     attempt, as its execution would: when its client leaves, or its wait
//     expires, the place is kept as a placeholder for cancel_after (plus
//     the Retry-After it was given), and a retry of the same call takes it
//     over; otherwise it is dropped. A placeholder holds no body, is never
//     admitted and never counts in flight. So a call queued through an
//     overload keeps its turn across its attempts, while newest_first keeps
//     fresh calls on time.
//  6. Upstream: the engine's API key replaces the client's Authorization
//     when inject_api_key is on. The answer streams back unbuffered, every
//     read flushed, with X-Accel-Buffering: no on SSE.
//
// Every slot is released on every exit path (done, upstream error, client
// gone, panic). Without an idempotency key the upstream call is cancelled the
// moment its client leaves. With one, the execution runs on its own: when its
// last listener leaves, it is kept for cancel_after (10 s, longer than the
// SDKs' retry backoff) so the retry can attach, and only then cancelled.
//
// Every rejection is OpenAI-shaped ({"error":{"message","type","param",
// "code"}}, code = the reason) and carries Retry-After and retry-after-ms,
// never over 60 s (the OpenAI SDKs ignore longer waits), computed as the
// queue ahead divided by the measured completion rate (plus up to 20% jitter
// so rejected clients do not return together), and x-should-retry.
//
// # The cap needs no tuning
//
// max_in_flight 0 (the default) derives the cap from the engine itself;
// there is no capacity figure to measure or guess. The automatic cap is the
// most work the engine runs at once without queueing it, kept within the
// TTFT objective (ttft_target, default 2 s, the latency promised to clients,
// not a capacity). Anything beyond waits in vigil's queue instead of the
// engine's: bounded, newest first, dropped when its client leaves, answered
// with an honest Retry-After.
//
// Why these signals. A continuous-batching engine (vLLM) starts every
// request it has room for at once, so its own waiting gauge
// (vllm:num_requests_waiting, read from its /metrics four times a second
// while requests are in flight) counts exactly the work the cap let in
// beyond the engine's batch or KV capacity: a queue there means the cap is
// too high, no queue with demand means it may grow. Below that capacity
// latency still rises with the batch (slower steps, larger prefill waves: in
// the simulated engine TTFT grows 4x from 1 to 8 requests in flight while
// inter-token latency stays flat), so a latency-ratio limiter (Netflix-style
// gradient, TTFT against its unloaded value) stops far below capacity and
// throws throughput away; and no latency signal alone can tell "the engine
// is busy" from "the engine is queueing". The TTFT objective then bounds the
// cap where a full batch would answer too slowly: goodput (answers meeting
// the objective) is maximal at the largest cap whose TTFT meets it, and at
// the batch size when it is loose. The engine's knee bounds it otherwise: by
// Little's law the mean service time of an answer is S = N/X (N in flight, X
// completions a second); below the knee S stays near its unloaded value,
// past it S grows in proportion to N while X no longer does, so every
// request added only slows the others. The cap keeps S within three times
// its minimum (the lowest estimate, which doubles over ten minutes unless
// seen again, so a slower engine is relearned), two thirds of the throughput
// ceiling; unlike a TTFT ratio it judges whole answers, which a batch below
// the knee barely slows. Upstream failures (5xx, refused, reset) cut the cap
// too.
//
// The law (see autoLimit): evidence is gathered in windows; only requests
// admitted after the last change are judged, so each change is judged by its
// own effect. The engine's queue above 1 on average cuts the cap to
// running/(running+waiting) of itself; a TTFT p90 over the objective cuts it
// by target/p90; a mean service time S over three times its minimum by
// 3*Smin/S (each estimate of S, every 20 answers, used once); failures by
// 10% (never more than half at once). Otherwise, when demand filled the cap,
// answers are flowing, and the p90 and S are within 80% of their bounds, it
// grows by x1.25 until the engine first shows a queue, then by 5% a window
// (while the gauges are readable, only on a window that read them). It
// starts at 16 and stays within [2, 256]. Without readable metrics it falls
// back to the objective and failures; for non-streamed answers (no first
// token to time) it relies on the engine's queue and the knee. In the
// simulated engine with a batch of 40 it settles at 40-45 with the engine's
// queue averaging about 1, completing as much as a cap fixed at 40; with a
// 150 ms objective it settles near 22, where the prefill wave meets it. On
// streamed chat traffic that never queues in the engine (bench/README.md,
// goodput) the knee holds it near 68 in flight, where it ran to 110-150.
//
// # Control
//
// The watchdog steers the limiter through a narrow surface. SetSaturated(true)
// (the engine progresses under a deep queue of its own, which the limiter's
// signal missed, e.g. traffic that bypasses it): a fixed cap admits 3/4 of
// itself, the automatic cap is cut by 1/4 once and does not grow until
// cleared; the excess waits and is shed by the bounded queue with 503.
// SetRecovering(true) (restarting): every request and waiter gets 503 with
// Retry-After 30 s; clearing it starts SlowStart: the cap ramps from 10% to
// full over slow_start, and the automatic cap relearns its baselines.
// SetMaxInFlight and MaxInFlight serve expiring overrides (0 = automatic).
//
// Everything is counted in Stats and as vigil_admission_* metrics: calls and
// executions (retry amplification), retries, admitted, queued, abandoned,
// rejected by reason, coalesced (attached, stored), cancelled (immediate,
// deferred), queue depth, held queue places and oldest age,
// in-flight, the cap in force.
package admission
