// Package haproxy ships the HAProxy configuration for a pool of vigil
// nodes (pool.cfg: calls hashed by Idempotency-Key on a consistent ring,
// the rest round-robin, the runtime-API socket vigil drains through) and
// renders it with local addresses so tests and benchmarks run the very
// file operators install.
package haproxy
