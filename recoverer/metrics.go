package recoverer

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-dev/vigil/recovery"
)

// metrics are the recovery's own counters (vigil_recovery_*).
type metrics struct {
	active   prometheus.Gauge
	drains   prometheus.Counter
	restarts prometheus.Counter
	skipped  prometheus.Counter
	refusals *prometheus.CounterVec
	failures *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "vigil_recovery_active",
			Help: "1 while a recovery sequence runs (including a drained host waiting to retry).",
		}),
		drains: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_recovery_drains_total",
			Help: "Drains of this host at the load balancer by vigil.",
		}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_recovery_restarts_total",
			Help: "Engine restarts by vigil.",
		}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_recovery_restarts_skipped_total",
			Help: "Restarts skipped because the engine had already restarted by itself.",
		}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_recovery_guard_refusals_total",
			Help: "Recovery attempts a guard refused, by guard.",
		}, []string{"guard"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_recovery_failures_total",
			Help: "Recovery steps that failed, by step.",
		}, []string{"step"}),
	}
	// Every guard shows from the start, at 0, so a dashboard or an alert
	// rule on a guard's rate works before the first refusal.
	for _, g := range []recovery.Guard{recovery.GuardStartupGrace, recovery.GuardCooldown, recovery.GuardBudget, recovery.GuardPoolLock} {
		m.refusals.WithLabelValues(string(g))
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.active, m.drains, m.restarts, m.skipped, m.refusals, m.failures} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("recovery: register recovery metrics: %w", err)
		}
	}
	return m, nil
}
