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
}

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
	}
	for _, k := range []Kind{KindHead, KindChange, KindUpdate, KindStep, KindResolve, KindHeadUpdate, KindNotice, KindDropped} {
		m.sent.WithLabelValues(string(k))
	}
	m.errors.WithLabelValues("true")
	m.errors.WithLabelValues("false")
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.sent, m.queued, m.dropped, m.errors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("alerts: register metrics: %w", err)
		}
	}
	return m, nil
}
