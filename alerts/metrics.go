package alerts

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics counts what the pager does, for vigil's own /metrics.
type metrics struct {
	sent    *prometheus.CounterVec
	queued  prometheus.Gauge
	dropped prometheus.Counter
	errors  *prometheus.CounterVec
	failed  *prometheus.CounterVec
}

// Why a page was given up, the reason label of vigil_alerts_pages_failed_total.
const (
	failRejected   = "rejected"    // the notifier refused it for good (bad token, no channel)
	failOutboxFull = "outbox_full" // dropped from the full outbox
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_alerts_pages_sent_total",
			Help: "Pages delivered, by kind (head, change, update, step, resolve, head_update, notice, dropped).",
		}, []string{"kind"}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "vigil_alerts_outbox_queued",
			Help: "Pages waiting in the outbox for delivery.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_alerts_pages_dropped_total",
			Help: "Pages dropped because the outbox was full (evidence updates first).",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_alerts_send_errors_total",
			Help: "Failed delivery attempts, by whether they will be retried.",
		}, []string{"retry"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_alerts_pages_failed_total",
			Help: "Pages that never reached the notifier, by reason (rejected: refused for good, e.g. a bad token; outbox_full: dropped).",
		}, []string{"reason"}),
	}
	for _, k := range []Kind{KindHead, KindChange, KindUpdate, KindStep, KindResolve, KindHeadUpdate, KindNotice, KindDropped} {
		m.sent.WithLabelValues(string(k))
	}
	m.errors.WithLabelValues("true")
	m.errors.WithLabelValues("false")
	m.failed.WithLabelValues(failRejected)
	m.failed.WithLabelValues(failOutboxFull)
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.sent, m.queued, m.dropped, m.errors, m.failed} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("alerts: register metrics: %w", err)
		}
	}
	return m, nil
}
