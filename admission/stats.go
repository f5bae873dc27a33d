package admission

import (
	"maps"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-dev/vigil/admission/engineloss"
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
	// LearnedClientTimeouts are the client timeouts learned per path from
	// clients that announce none and give up (see admission.client_timeouts).
	LearnedClientTimeouts map[string]time.Duration `json:"learned_client_timeouts_ns,omitempty"`
	// PatientStreamRoutes are the paths whose clients come back for the
	// streams turned away: under ttft_target auto their streams wait up
	// to a person's patience, not only the objective.
	PatientStreamRoutes []string `json:"patient_stream_routes,omitempty"`
}

// Stats returns a snapshot.
func (l *Limiter) Stats() Stats {
	// Found before all: a retry counts itself before it finds, so this
	// order never shows more found than retries.
	found := l.c.keyedRetriesFound.Load()
	s := Stats{
		KeyedRetriesFound:  found,
		KeyedRetries:       l.c.keyedRetries.Load(),
		Calls:              l.c.calls.Load(),
		Executions:         l.c.executions.Load(),
		Retries:            l.c.retries.Load(),
		Rejected:           make(map[string]uint64, len(l.c.rejected)),
		CoalescedAttached:  l.c.attached.Load(),
		CoalescedStored:    l.c.stored.Load(),
		Adopted:            l.c.adopted.Load(),
		AdoptedStored:      l.c.adoptedStored.Load(),
		CancelledImmediate: l.c.cancelledImmediate.Load(),
		CancelledDeferred:  l.c.cancelledDeferred.Load(),
		UpstreamErrors:     l.c.upstreamErrors.Load(),
		PassedThrough:      l.c.passedThrough.Load(),
	}
	for r, c := range l.c.rejected {
		s.Rejected[r] = c.Load()
	}
	s.StoredResults, s.StoredBytes, s.Running, s.Orphans = l.co.Stats()
	s.Moved, s.Held, s.Continued = l.c.moved.Load(), l.c.held.Load(), l.c.continued.Load()
	l.lostMu.Lock()
	s.Lost = maps.Clone(l.lost)
	l.lostMu.Unlock()
	_, s.HeldNow = l.out.Snapshot()
	s.Suspected = l.Suspected()
	s.Suspicions, s.FalseSuspicions, s.Diverted = l.c.suspicions.Load(), l.c.falseSuspicions.Load(), l.c.diverted.Load()
	for r, c := range l.c.heldRefused {
		if n := c.Load(); n > 0 {
			if s.HeldRefused == nil {
				s.HeldRefused = map[string]uint64{}
			}
			s.HeldRefused[r] = n
		}
	}
	cs := l.core.Stats()
	s.HeldWaits = cs.HeldWaits
	s.Admitted, s.Queued, s.QueueAbandoned = cs.Admitted, cs.Queued, cs.Abandoned
	s.QueueDepth, s.QueueHeld, s.OldestQueued = cs.QueueDepth, cs.QueueHeld, cs.OldestQueued
	s.InFlight, s.Cap, s.Automatic = cs.InFlight, cs.Cap, cs.Automatic
	s.FirstTokenLimit, s.AwaitingFirstToken = cs.FirstTokenLimit, cs.AwaitingFirstToken
	s.TTFTObjective = cs.TTFTObjective
	s.Service, s.ServiceBaseline, s.ServiceKneeApplies = cs.Service, cs.ServiceBaseline, cs.ServiceKneeApplies
	s.Saturated, s.Recovering, s.SlowStart = cs.Saturated, cs.Recovering, cs.SlowStart
	s.CompletionRate = cs.CompletionRate
	s.EngineWaiting, s.EngineRunning = cs.EngineWaiting, cs.EngineRunning
	s.LearnedClientTimeouts = cs.LearnedTimeouts
	s.PatientStreamRoutes = cs.PatientRoutes
	return s
}

// collector exposes Stats as vigil_admission_* metrics, read at scrape
// time so the metrics and Stats can never disagree.
type collector struct{ l *Limiter }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("vigil_admission_"+name, help, labels, nil)
}

var (
	descCalls      = desc("calls_total", "Admission-controlled requests seen (every attempt).")
	descExecutions = desc("executions_total", "Upstream executions created; against calls_total, the retry amplification.")
	descRetries    = desc("retries_total", "Attempts that were retries (X-Stainless-Retry-Count > 0 or a known call key).")
	descAdmitted   = desc("admitted_total", "Requests given an in-flight slot.")
	descQueued     = desc("queued_total", "Requests that waited in the queue for a slot.")
	descAbandoned  = desc("queue_abandoned_total", "Queued requests whose client left before a slot freed.")
	descRejected   = desc("rejected_total", "Requests answered by the limiter itself, by reason.", "reason")
	descCoalesced  = desc("coalesced_total", "Attempts served by another attempt's execution: attached live or from the result store.", "how")
	descAdopted    = desc("adopted_total", "Keyless attempts handed the orphaned work of an identical request whose client "+
		"left before its answer began: its running execution or its stored answer.", "how")
	descCancelled = desc("cancelled_total", "Upstream calls cancelled: immediate (client left, no key) or deferred (cancel_after expired).", "how")
	descUpErrors  = desc("upstream_errors_total", "Upstream calls refused, reset or broken off by the engine.")
	descPassed    = desc("passed_through_total", "Uncapped requests (GET, HEAD, OPTIONS).")
	descDepth     = desc("queue_depth", "Requests waiting for a slot.")
	descOldest    = desc("oldest_queued_seconds", "Age of the oldest waiting request.")
	descHeld      = desc("queue_held", "Queue places kept for keyed calls whose attempt ended, until their retry resumes them.")
	descInFlight  = desc("in_flight", "Requests forwarded upstream and unfinished.")
	descCap       = desc("cap", "In-flight cap in force (automatic or fixed, after slow start and saturation).")
	descAutomatic = desc("cap_automatic", "1 when the cap is derived automatically (max_in_flight 0).")
	descFTLimit   = desc("first_token_limit", "Streams that may await their first token at once (0: no limit; automatic cap with ttft_target).")
	descObjective = desc("ttft_objective_seconds", "The time-to-first-token objective in force: ttft_target, or the one auto derives from the engine (0: none).")
	descAwaiting  = desc("awaiting_first_token", "Streams forwarded upstream whose first token has not come yet.")
	descRate      = desc("completion_rate", "Upstream calls finished per second over the last 10 s.")
	descStored    = desc("stored_results", "Finished results kept for late retries.")
	descStoredB   = desc("stored_bytes", "Bytes held by the result store.")
	descOrphans   = desc("orphans", "Executions whose every client left, kept for a retry to attach or adopt.")
	descLostCalls = desc("engine_lost_calls_total", "Calls in flight on an engine declared hung or down, by what became of "+
		"them: moved to a pool peer, held for the restarted engine, continued (streams), lost (ended with an error, by reason).", "fate", "reason")
	descSuspected = desc("stall_suspected", "1 while the engine is suspected stalled: nothing new goes to it.")
	descSuspicion = desc("stall_suspicions_total", "Stall suspicions raised, by whether progress cleared them before a verdict (false).", "false")
	descHeldCalls = desc("held_engine_calls_total", "Calls that met a held engine (suspected stalled, recovered, ramping "+
		"after the restart): diverted to a pool peer, waited past their queue bound, refused (by reason).", "fate", "reason")
	descHeldNow    = desc("held_for_recovery", "Calls held for the engine being recovered, to be sent once it is ready.")
	descKeyedRetry = desc("keyed_retries_total", "Keyed retries that had an execution to find, by whether they found it "+
		"(attached or stored); a low found share means the load balancer does not route by Idempotency-Key.", "found")
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCalls, descExecutions, descRetries, descAdmitted, descQueued,
		descAbandoned, descRejected, descCoalesced, descAdopted, descCancelled, descUpErrors, descPassed, descDepth, descOldest,
		descHeld, descInFlight, descCap, descAutomatic, descFTLimit, descObjective, descAwaiting, descRate, descStored, descStoredB, descOrphans, descKeyedRetry,
		descLostCalls, descHeldNow, descSuspected, descSuspicion, descHeldCalls} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.l.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter(descCalls, s.Calls)
	counter(descExecutions, s.Executions)
	counter(descRetries, s.Retries)
	counter(descAdmitted, s.Admitted)
	counter(descQueued, s.Queued)
	counter(descAbandoned, s.QueueAbandoned)
	for _, r := range allReasons {
		counter(descRejected, s.Rejected[r], r)
	}
	counter(descCoalesced, s.CoalescedAttached, "attached")
	counter(descCoalesced, s.CoalescedStored, "stored")
	counter(descAdopted, s.Adopted, "running")
	counter(descAdopted, s.AdoptedStored, "stored")
	counter(descCancelled, s.CancelledImmediate, "immediate")
	counter(descCancelled, s.CancelledDeferred, "deferred")
	counter(descKeyedRetry, s.KeyedRetriesFound, "true")
	counter(descKeyedRetry, s.KeyedRetries-s.KeyedRetriesFound, "false")
	counter(descUpErrors, s.UpstreamErrors)
	counter(descPassed, s.PassedThrough)
	gauge(descDepth, float64(s.QueueDepth))
	gauge(descOldest, s.OldestQueued.Seconds())
	gauge(descHeld, float64(s.QueueHeld))
	gauge(descInFlight, float64(s.InFlight))
	gauge(descCap, float64(s.Cap))
	auto := 0.0
	if s.Automatic {
		auto = 1
	}
	gauge(descAutomatic, auto)
	gauge(descFTLimit, float64(s.FirstTokenLimit))
	gauge(descObjective, s.TTFTObjective.Seconds())
	gauge(descAwaiting, float64(s.AwaitingFirstToken))
	gauge(descRate, s.CompletionRate)
	gauge(descStored, float64(s.StoredResults))
	gauge(descStoredB, float64(s.StoredBytes))
	gauge(descOrphans, float64(s.Orphans))
	counter(descLostCalls, s.Moved, "moved", "")
	counter(descLostCalls, s.Held, "held", "")
	counter(descLostCalls, s.Continued, "continued", "")
	for _, why := range engineloss.LossReasons {
		counter(descLostCalls, s.Lost[why], "lost", why)
	}
	gauge(descHeldNow, float64(s.HeldNow))
	sus := 0.0
	if s.Suspected {
		sus = 1
	}
	gauge(descSuspected, sus)
	counter(descSuspicion, s.Suspicions-s.FalseSuspicions, "false")
	counter(descSuspicion, s.FalseSuspicions, "true")
	counter(descHeldCalls, s.Diverted, "diverted", "")
	counter(descHeldCalls, s.HeldWaits, "waited", "")
	for _, r := range allReasons {
		counter(descHeldCalls, s.HeldRefused[r], "refused", r)
	}
}
