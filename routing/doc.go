// Package routing judges whether the load balancer routes a client's
// retries to the node that ran its call: the share of keyed retries
// (Idempotency-Key) that found their execution here, from the limiter's
// counters. Without key-affine routing a retry lands on a member that
// never saw the call and starts the work again, so coalescing saves
// nothing; vigil pages once when that is so and once when it is over.
package routing
