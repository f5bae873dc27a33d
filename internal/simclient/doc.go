// Package simclient is the clients that `vigil demo` and the benchmarks
// send to the simulated engine: a Caller that sends and retries the way
// the official OpenAI SDKs do (timeouts, backoff, Retry-After,
// X-Stainless-* headers, an Idempotency-Key), calls whose token counts
// the simulated engine takes from the body (SimCall), and the clock that
// keeps their durations in the engine's time (Clock, ScaleAdmission).
//
// It lives outside bench/ because the vigil binary's demo uses it.
package simclient
