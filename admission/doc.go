// Package admission is vigil's embedded limiter: a reverse proxy in front of
// the engine's OpenAI API that keeps the engine's own queue shallow, so an
// overload stays short and client retries never turn it into a metastable
// failure (docs/design.md section 6).
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
// # Where to look
//
// What decides admission is package core (admission/core; its doc.go says
// what decides, in order). How HTTP reaches it is this package: request.go
// reads a request's facts into a core.Request, proxy.go admits it in
// stages (body.go reads the body, identity.go identifies the call,
// attempt.go finds its work or acquires a slot and runs it, stream.go
// streams the answer, package usage meters it), package calls (admission/calls) remembers calls:
// it runs a keyed call once for all its attempts, keeps finished answers
// for late retries and keyless orphans for adoption; reject.go answers the
// core's rejections. outage.go and relay.go send the calls of a lost
// engine again, suspect.go acts on a stalled one meanwhile; package
// engineloss decides the rest (docs/design.md, the hang window): the stall
// suspicion and its loop (Suspicion, asking the limiter through a Host),
// where a cut call moves (Mover, Relay), a stream's continuation, the
// outage's accounting; package inflight follows the calls on the engine
// and cuts them when it is lost. Package enginepoll reads the engine's load for the
// cap (through package probes: its /metrics, and llama.cpp's seats);
// package stats is the limiter's report of itself (Stats, the metrics).
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
//     result_store_bytes). Neither costs a slot or quota. Without the
//     header the request's fingerprint (tenant, method, path with query,
//     body) finds an orphan: the execution of an identical request whose
//     client (an SDK that retries timeouts) left before its answer began,
//     running or finished; the request adopts it. Two live clients never
//     share an execution.
//  3. Admission, decided by package core (see its documentation: tenants'
//     quotas, the retry budget, the in-flight cap and its queue). This
//     package reads the request's facts into a core.Request: the tenant
//     (the SHA-256 of the bearer key), the tokens it asks for (prompt
//     bytes/4 plus max_tokens, 256 when absent), whether it is a retry
//     (X-Stainless-Retry-Count > 0, its call key seen before or an
//     identical keyless request left unanswered, and whether that call ever
//     got an execution here), the client's timeout
//     (X-Stainless-Timeout; the OpenAI Node SDK sends it only with a
//     per-request timeout, so the core infers the rest: the path is the
//     route it learns timeouts for, from the clients this package sees
//     leave before their answer began, and from the keyed retries that
//     follow), whether the body asks for a stream, its call key and body
//     size. core.Acquire
//     answers with a slot, or a rejection this package sends as 429
//     (rate_limit_error: the key's quotas, the retry budget) or 503
//     (server_error: queue full, wait expired, a stream the queue would not
//     reach in time; never for an engine suspected stalled or restarting,
//     whose calls go to a pool peer or wait).
//  4. Upstream: the engine's API key replaces the client's Authorization
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
// # The cap and the control surface
//
// The in-flight cap needs no tuning: max_in_flight 0 (the default) derives
// it from the engine (its waiting gauge, read from its /metrics four times
// a second while requests are in flight, through the watchdog's engine
// reader, probes.Reader) and from the clients' own deadlines; package core
// documents the law. The watchdog
// steers the limiter through SetSaturated, SetRecovering, SlowStart and
// SetMaxInFlight, which this package passes to the core.
//
// Everything is counted in Stats and as vigil_admission_* metrics (package
// stats): calls and
// executions (retry amplification), retries, admitted, queued, abandoned,
// rejected by reason, coalesced (attached, stored), cancelled (immediate,
// deferred), queue depth, held queue places and oldest age,
// in-flight, the cap in force.
package admission
