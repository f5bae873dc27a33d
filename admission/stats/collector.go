package stats

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-dev/vigil/admission/engineloss"
)

// NewCollector exposes the Stats snapshot returns as vigil_admission_*
// metrics, read at scrape time so the metrics and Stats can never
// disagree. reasons are the limiter's rejection reasons: each is a series
// from the start, at zero until it happens.
func NewCollector(snapshot func() Stats, reasons []string) prometheus.Collector {
	return &collector{snapshot: snapshot, reasons: reasons}
}

type collector struct {
	snapshot func() Stats
	reasons  []string
}

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
	descHeldNow = desc("held_for_recovery", "Calls held for the engine being recovered, to be sent once it is ready.")
	descPaused  = desc("paused_seconds_total", "Time vigil itself was not running (a starved host: descheduled, "+
		"stopped, collecting garbage), measured by how late its own ticks fire; the stall watch does not count it "+
		"against the engine.")
	descKeyedRetry = desc("keyed_retries_total", "Keyed retries that had an execution to find, by whether they found it "+
		"(attached or stored); a low found share means the load balancer does not route by Idempotency-Key.", "found")
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCalls, descExecutions, descRetries, descAdmitted, descQueued,
		descAbandoned, descRejected, descCoalesced, descAdopted, descCancelled, descUpErrors, descPassed, descDepth, descOldest,
		descHeld, descInFlight, descCap, descAutomatic, descFTLimit, descObjective, descAwaiting, descRate, descStored, descStoredB, descOrphans, descKeyedRetry,
		descLostCalls, descHeldNow, descSuspected, descSuspicion, descHeldCalls, descPaused} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
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
	for _, r := range c.reasons {
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
	for _, r := range c.reasons {
		counter(descHeldCalls, s.HeldRefused[r], "refused", r)
	}
	ch <- prometheus.MustNewConstMetric(descPaused, prometheus.CounterValue, s.Paused.Seconds())
}
