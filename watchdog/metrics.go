package watchdog

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-dev/vigil/probes"
)

var allStates = []State{StateLoading, StateDown, StateMisconfigured, StateHung, StateSaturated, StateHealthy, StateUnknown}

// metrics are vigil's own vigil_watchdog_* series.
type metrics struct {
	state        *prometheus.GaugeVec
	opened       prometheus.Counter
	probeSeconds *prometheus.HistogramVec
	probeErrors  *prometheus.CounterVec
	scrapeErrors prometheus.Counter
	cycles       prometheus.Counter
	hangAfter    prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "vigil_watchdog_state",
			Help: "1 for the watchdog's current verdict, 0 for the other states.",
		}, []string{"state"}),
		opened: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_watchdog_incidents_opened_total",
			Help: "Incidents opened (first verdict that counts: saturated, hung, down, misconfigured, lasting unknown).",
		}),
		probeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "vigil_watchdog_probe_duration_seconds",
			Help:    "Latency of the watchdog's probes of the engine, by probe.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 90, 120},
		}, []string{"probe"}),
		probeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_watchdog_probe_errors_total",
			Help: "Failed probes of the engine, by probe and error class.",
		}, []string{"probe", "class"}),
		scrapeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_watchdog_scrape_errors_total",
			Help: "Engine /metrics scrapes that were unreadable (failed, malformed, or missing a required metric).",
		}),
		cycles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_watchdog_cycles_total",
			Help: "Sampling cycles run.",
		}),
		hangAfter: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "vigil_watchdog_hang_after_seconds",
			Help: "The hang_after window in force: fixed, or sized from the engine's work each cycle (auto).",
		}),
	}
	for _, s := range allStates {
		m.state.WithLabelValues(string(s))
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.state, m.opened, m.probeSeconds, m.probeErrors, m.scrapeErrors, m.cycles, m.hangAfter} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("watchdog: register metrics: %w (one watchdog per registry)", err)
			}
			return nil, fmt.Errorf("watchdog: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) verdict(v Verdict, opened bool) {
	m.cycles.Inc()
	for _, s := range allStates {
		val := 0.0
		if s == v.State {
			val = 1
		}
		m.state.WithLabelValues(string(s)).Set(val)
	}
	if opened {
		m.opened.Inc()
	}
}

func (m *metrics) probe(name string, o probes.Observation) {
	if !o.Taken() {
		return
	}
	m.probeSeconds.WithLabelValues(name).Observe(o.Latency.Seconds())
	if !o.OK() {
		m.probeErrors.WithLabelValues(name, string(o.Class)).Inc()
	}
}
