package stats

import (
	"time"

	"github.com/vigil-dev/vigil/recovery"
)

// Stats is a snapshot of what the limiter has done and holds.
type Stats struct {
	// Calls counts admission-controlled requests seen (every attempt).
	Calls uint64 `json:"calls"`
	// Executions counts upstream calls started for them; with Calls it
	// shows the retry amplification the engine is exposed to.
	Executions uint64 `json:"executions"`
	// Retries counts attempts that were retries (X-Stainless-Retry-Count
	// > 0, or a call key already seen).
	Retries uint64 `json:"retries"`
	// Admitted counts requests given a slot; Queued those that waited for
	// one; QueueAbandoned those whose client left while waiting.
	Admitted       uint64 `json:"admitted"`
	Queued         uint64 `json:"queued"`
	QueueAbandoned uint64 `json:"queue_abandoned"`
	// Rejected counts answers the limiter gave itself, by Reason*.
	Rejected map[string]uint64 `json:"rejected"`
	// CoalescedAttached counts attempts that joined a running execution;
	// CoalescedStored those answered from the result store.
	CoalescedAttached uint64 `json:"coalesced_attached"`
	CoalescedStored   uint64 `json:"coalesced_stored"`
	// KeyedRetries counts keyed retries (coalescing on) that had an
	// execution to find: their call executed here before, or their key is
	// new here although the SDK marks them a retry (an earlier attempt went
	// to another node). KeyedRetriesFound counts those that attached to the
	// running execution or got its stored result. A low share of found
	// over a window means the load balancer does not route by key.
	KeyedRetries      uint64 `json:"keyed_retries"`
	KeyedRetriesFound uint64 `json:"keyed_retries_found"`
	// Adopted counts keyless attempts handed the running execution of an
	// identical request (same tenant, method, path and body) whose client
	// left before its answer began; AdoptedStored those handed its answer,
	// finished after the client left. Keyed attaches are not adoptions.
	Adopted       uint64 `json:"adopted"`
	AdoptedStored uint64 `json:"adopted_stored"`
	// CancelledImmediate counts upstream calls cancelled when their client
	// left; CancelledDeferred keyed executions cancelled after cancel_after
	// with nobody attached.
	CancelledImmediate uint64 `json:"cancelled_immediate"`
	CancelledDeferred  uint64 `json:"cancelled_deferred"`
	// UpstreamErrors counts calls the engine refused, reset or broke off.
	UpstreamErrors uint64 `json:"upstream_errors"`
	// PassedThrough counts uncapped requests (GET, HEAD, OPTIONS).
	PassedThrough uint64 `json:"passed_through"`

	QueueDepth int `json:"queue_depth"`
	// QueueHeld counts queue places kept for keyed calls whose attempt
	// ended (client timed out, or queue wait expired), until their retry
	// resumes from them or cancel_after passes.
	QueueHeld    int           `json:"queue_held"`
	OldestQueued time.Duration `json:"oldest_queued_ns"`
	InFlight     int           `json:"in_flight"`
	// Cap is the in-flight cap in force; Automatic tells whether it is
	// derived (max_in_flight 0) or fixed.
	Cap       int  `json:"cap"`
	Automatic bool `json:"automatic"`
	// FirstTokenLimit bounds the streams awaiting their first token
	// (AwaitingFirstToken) at once: the automatic cap's answer to the TTFT
	// objective (0: none, with a fixed cap or no ttft_target).
	FirstTokenLimit    int `json:"first_token_limit"`
	AwaitingFirstToken int `json:"awaiting_first_token"`
	// TTFTObjective is the first-token objective in force: ttft_target,
	// or with auto the one derived from the engine's own time to first
	// token (0: none).
	TTFTObjective time.Duration `json:"ttft_objective_ns"`
	// Service and ServiceBaseline: the automatic cap's latest estimate of
	// the mean service time (admission to last byte) and the minimum it
	// judges that against (its knee: 3x); 0 until measured.
	Service         time.Duration `json:"service_ns"`
	ServiceBaseline time.Duration `json:"service_baseline_ns"`
	// ServiceKneeApplies: the knee judges the cap by Service; false while
	// Service is of streams under a TTFT objective, whose first tokens
	// judge it (a decode-bound engine's streams slow with the batch).
	ServiceKneeApplies bool `json:"service_knee_applies"`
	Saturated          bool `json:"saturated"`
	Recovering         bool `json:"recovering"`
	SlowStart          bool `json:"slow_start"`
	// CompletionRate is upstream calls finished per second over the last
	// 10 s, the rate Retry-After is computed from.
	CompletionRate float64 `json:"completion_rate"`
	// EngineWaiting and EngineRunning are the engine's queue gauges as last
	// read for the automatic cap (-1: never read).
	EngineWaiting float64 `json:"engine_waiting"`
	EngineRunning float64 `json:"engine_running"`
	// Running executions (keyed calls), StoredResults and StoredBytes
	// describe the call memory (package calls).
	Running       int `json:"running_executions"`
	StoredResults int `json:"stored_results"`
	// Orphans counts executions running on after every client left, kept
	// for a retry: keyed ones for their key's retry to attach, keyless
	// ones (their client left before the answer began) for an identical
	// request to adopt.
	Orphans     int   `json:"orphans"`
	StoredBytes int64 `json:"stored_bytes"`
	// Calls cut by a lost engine (SetRecovering), since start: Moved to
	// a pool peer, Held for the restarted engine, streams Continued, and
	// Lost (ended with an error that says why), by loss reason.
	// HeldNow counts the calls held for the engine now.
	Moved     uint64            `json:"moved"`
	Held      uint64            `json:"held"`
	Continued uint64            `json:"continued"`
	Lost      map[string]uint64 `json:"lost,omitempty"`
	HeldNow   int               `json:"held_now"`
	// The hang window (docs/design.md): Suspected says the engine is
	// suspected stalled now; Suspicions counts the suspicions raised,
	// FalseSuspicions those its progress cleared before any verdict.
	// Diverted counts calls sent to a pool peer instead of a held engine
	// (suspected, recovered); HeldWaits queue waits that reached their
	// bound while the engine was held and went on instead of being
	// refused; HeldRefused the calls refused (503) while it was held, by
	// reason: what a hang still cost.
	Suspected       bool              `json:"suspected"`
	Suspicions      uint64            `json:"suspicions"`
	FalseSuspicions uint64            `json:"false_suspicions"`
	Diverted        uint64            `json:"diverted"`
	HeldWaits       uint64            `json:"held_waits"`
	HeldRefused     map[string]uint64 `json:"held_refused,omitempty"`
	// Paused is the time vigil itself was not running since it started
	// (a starved host: its process descheduled, stopped, collecting
	// garbage), as its pause meter measured: the stall watch does not
	// count it against the engine.
	Paused time.Duration `json:"paused_ns"`
	// LastHang is what the last (or current) hang window cost, with its
	// moments (the recovery page's line comes from it; nil: none yet).
	LastHang *recovery.CallFate `json:"last_hang,omitempty"`
	// LearnedClientTimeouts are the client timeouts learned per path from
	// clients that announce none and give up (see admission.client_timeouts).
	LearnedClientTimeouts map[string]time.Duration `json:"learned_client_timeouts_ns,omitempty"`
	// PatientStreamRoutes are the paths whose clients come back for the
	// streams turned away: under ttft_target auto their streams wait up
	// to a person's patience, not only the objective.
	PatientStreamRoutes []string `json:"patient_stream_routes,omitempty"`
}
