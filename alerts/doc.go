// Package alerts tells humans what vigil saw and what it will and will not
// do: it turns verdicts and recovery steps into one Slack thread per
// incident (or log lines), paging on state changes only, and delivers them
// through a persisted, ordered, bounded outbox that never blocks the
// watchdog loop.
//
// Two pages exactly as they render in plain text (the log notifier and
// Slack's notification fallback):
//
//	:large_orange_circle: SATURATED on node1 (http://127.0.0.1:8000): engine 99 waiting, 8 running, 2,340 tok/s, counters +35,100 in 15s; 12 queued in vigil's limiter; probe 200 in 12.4s; est. drain 6m. Not restarting: the engine is making progress. The limiter is shedding excess load: 42% of 310 calls answered 429/503 with Retry-After.
//
//	:red_circle: HUNG on node1 (http://127.0.0.1:8000): no progress for 3m05s with 40 waiting, 8 running; /v1/models 200 in 3ms; probe outstanding for 95s. Will drain vllm/node1 at HAProxy, restart container vllm, restore traffic gradually (10% → 100% over 2m).
package alerts
