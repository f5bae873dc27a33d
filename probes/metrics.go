package probes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/vigil-dev/vigil/configs"
)

// EndpointMetrics is the engine's Prometheus scrape.
const EndpointMetrics = "/metrics"

// Metrics the watchdog reads beside the configured ones, always by these
// exact vLLM names: the retry-storm alarm compares prompt tokens with
// prefix-cache queries, the drain estimate needs finished requests, and
// Little's law needs the end-to-end latency histogram's sum and count.
const (
	MetricPromptTokens       = "vllm:prompt_tokens_total"
	MetricPrefixCacheQueries = "vllm:prefix_cache_queries_total"
	MetricRequestSuccess     = "vllm:request_success_total"
	MetricE2ELatencySum      = "vllm:e2e_request_latency_seconds_sum"
	MetricE2ELatencyCount    = "vllm:e2e_request_latency_seconds_count"
	MetricQueueTimeSum       = "vllm:request_queue_time_seconds_sum"
	MetricQueueTimeCount     = "vllm:request_queue_time_seconds_count"
)

var extraNames = []string{
	MetricPromptTokens, MetricPrefixCacheQueries, MetricRequestSuccess,
	MetricE2ELatencySum, MetricE2ELatencyCount,
	MetricQueueTimeSum, MetricQueueTimeCount,
}

// Metrics is one readable scrape, reduced to what the watchdog needs. Every
// value is summed over all its series: the engine label (data-parallel
// ranks) and any other label (model_name, finished_reason).
type Metrics struct {
	Waiting float64 `json:"waiting"`
	Running float64 `json:"running"`
	// Progress holds each configured progress counter found, by name.
	Progress map[string]float64 `json:"progress"`
	// Heartbeats holds each configured heartbeat counter found, by name.
	Heartbeats map[string]float64 `json:"heartbeats,omitempty"`
	// Extra holds the Metric* names above that the scrape had.
	Extra map[string]float64 `json:"extra,omitempty"`
}

// ProgressTotal is the sum of the progress counters (prompt + generation
// tokens by default).
func (m *Metrics) ProgressTotal() float64 {
	var sum float64
	for _, v := range m.Progress {
		sum += v
	}
	return sum
}

// MetricsObservation is one scrape of /metrics.
type MetricsObservation struct {
	Observation
	// Metrics is nil when the scrape was unreadable (failed request, bad
	// status, malformed, truncated, empty or HTML body, or a required
	// metric missing): unreadable is unknown, never zero.
	Metrics *Metrics `json:"metrics,omitempty"`
	// Missing lists configured metric names the scrape did not have. A
	// missing waiting, running or progress metric makes the scrape
	// unreadable; a missing heartbeat is only reported.
	Missing []string `json:"missing,omitempty"`
}

// Readable reports whether the scrape gave usable values.
func (m MetricsObservation) Readable() bool { return m.OK() && m.Metrics != nil }

// Scrape returns the /metrics probe for the given metric names.
func Scrape(names configs.MetricNames) ProbeFn[MetricsObservation] {
	return func(ctx context.Context, t Target) MetricsObservation {
		return scrape(ctx, t, names)
	}
}

func scrape(ctx context.Context, t Target, names configs.MetricNames) MetricsObservation {
	req, err := http.NewRequest(http.MethodGet, t.url(EndpointMetrics), nil)
	if err != nil {
		return MetricsObservation{Observation: fail(Observation{Endpoint: EndpointMetrics}, err)}
	}
	// Ask for the classic text format: it is what vLLM serves and what
	// the text parser reads; a server that answers protobuf is refused
	// below rather than misread.
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
	obs, hdr, body := do(ctx, t, req, EndpointMetrics)
	out := MetricsObservation{Observation: obs}
	if !obs.OK() {
		return out
	}
	if ct := hdr.Get("Content-Type"); ct != "" {
		mt, _, _ := mime.ParseMediaType(ct)
		if mt != "text/plain" && mt != "application/openmetrics-text" && mt != "" {
			out.Class, out.Error = ClassOther, fmt.Sprintf("metrics: unexpected content type %q: %s", ct, snippet(body))
			return out
		}
	}
	m, missing, err := ParseMetrics(bytes.NewReader(body), names)
	out.Missing = missing
	if err != nil {
		out.Class, out.Error = ClassOther, err.Error()
		return out
	}
	out.Metrics = &m
	return out
}

// ParseMetrics reads a Prometheus text-format scrape and extracts the
// configured metrics by exact name, summing every series of each. A
// histogram's or summary's count and sum are read as "<name>_count" and
// "<name>_sum" (vllm:iteration_tokens_total_count is the count of the
// histogram vllm:iteration_tokens_total). "_created" series are separate
// families in the text format and are never looked at.
//
// It returns an error, never zeros, for an empty, malformed, truncated or
// HTML body, a non-finite value, or a missing waiting, running or progress
// metric. missing lists every configured name the scrape lacked.
func ParseMetrics(r io.Reader, names configs.MetricNames) (m Metrics, missing []string, err error) {
	fams, err := parseFamilies(r)
	if err != nil {
		return Metrics{}, nil, err
	}
	var required []string
	get := func(name string, req bool) (float64, bool) {
		v, ok, verr := lookup(fams, name)
		if verr != nil && err == nil {
			err = verr
		}
		if !ok {
			missing = append(missing, name)
			if req {
				required = append(required, name)
			}
		}
		return v, ok
	}
	m.Waiting, _ = get(names.Waiting, true)
	m.Running, _ = get(names.Running, true)
	m.Progress = make(map[string]float64, len(names.Progress))
	for _, n := range names.Progress {
		if v, ok := get(n, true); ok {
			m.Progress[n] = v
		}
	}
	if len(names.Heartbeats) > 0 {
		m.Heartbeats = make(map[string]float64, len(names.Heartbeats))
	}
	for _, n := range names.Heartbeats {
		if v, ok := get(n, false); ok {
			m.Heartbeats[n] = v
		}
	}
	m.Extra = map[string]float64{}
	for _, n := range extraNames {
		v, ok, verr := lookup(fams, n)
		if verr != nil && err == nil {
			err = verr
		}
		if ok {
			m.Extra[n] = v
		}
	}
	if err != nil {
		return Metrics{}, missing, err
	}
	if len(required) > 0 {
		return Metrics{}, missing, fmt.Errorf("metrics: missing %s", strings.Join(required, ", "))
	}
	return m, missing, nil
}

func parseFamilies(r io.Reader) (fams map[string]*dto.MetricFamily, err error) {
	body, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("metrics: read: %w", err)
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil, errors.New("metrics: empty body")
	}
	if trimmed[0] == '<' {
		return nil, fmt.Errorf("metrics: body is HTML, not a scrape: %s", snippet(trimmed))
	}
	// The parser is third-party code fed by the network; a panic in it
	// must become an unreadable scrape, not a dead watchdog.
	defer func() {
		if p := recover(); p != nil {
			fams, err = nil, fmt.Errorf("metrics: parser panicked: %v", p)
		}
	}()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err = parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("metrics: parse: %w", err)
	}
	if len(fams) == 0 {
		return nil, errors.New("metrics: no samples in body")
	}
	return fams, nil
}

// lookup sums every series of name. ok is false when the scrape has no
// such series.
func lookup(fams map[string]*dto.MetricFamily, name string) (sum float64, ok bool, err error) {
	if name == "" {
		return 0, false, nil
	}
	pick := func(mt *dto.Metric) float64 { return plainValue(mt) }
	mf := fams[name]
	if mf == nil {
		base, suffix, cut := cutSuffix(name)
		if !cut {
			return 0, false, nil
		}
		mf = fams[base]
		if mf == nil || (mf.GetType() != dto.MetricType_HISTOGRAM && mf.GetType() != dto.MetricType_SUMMARY &&
			mf.GetType() != dto.MetricType_GAUGE_HISTOGRAM) {
			return 0, false, nil
		}
		if suffix == "_count" {
			pick = sampleCount
		} else {
			pick = sampleSum
		}
	}
	for _, mt := range mf.GetMetric() {
		v := pick(mt)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, false, fmt.Errorf("metrics: %s has a non-finite value (%v)", name, v)
		}
		sum += v
		ok = true
	}
	return sum, ok, nil
}

func cutSuffix(name string) (base, suffix string, ok bool) {
	for _, s := range []string{"_count", "_sum"} {
		if b, found := strings.CutSuffix(name, s); found && b != "" {
			return b, s, true
		}
	}
	return "", "", false
}

// plainValue reads a counter, gauge or untyped sample. Configuring a
// histogram or summary by its own name reads its count.
func plainValue(mt *dto.Metric) float64 {
	switch {
	case mt.Counter != nil:
		return mt.GetCounter().GetValue()
	case mt.Gauge != nil:
		return mt.GetGauge().GetValue()
	case mt.Untyped != nil:
		return mt.GetUntyped().GetValue()
	}
	return sampleCount(mt)
}

func sampleCount(mt *dto.Metric) float64 {
	if h := mt.GetHistogram(); h != nil {
		if h.SampleCountFloat != nil {
			return h.GetSampleCountFloat()
		}
		return float64(h.GetSampleCount())
	}
	if s := mt.GetSummary(); s != nil {
		return float64(s.GetSampleCount())
	}
	return 0
}

func sampleSum(mt *dto.Metric) float64 {
	if h := mt.GetHistogram(); h != nil {
		return h.GetSampleSum()
	}
	if s := mt.GetSummary(); s != nil {
		return s.GetSampleSum()
	}
	return 0
}
