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
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/vigil-dev/vigil/configs"
)

// EndpointMetrics is the engine's Prometheus scrape.
const EndpointMetrics = "/metrics"

// Metrics the watchdog reads beside the configured ones, keyed by these
// canonical (vLLM) names whichever engine it is: the retry-storm alarm
// compares prompt tokens with prefix-cache queries, the drain estimate
// needs finished requests, and Little's law needs the end-to-end latency
// histogram's sum and count. The engine profile says which of them the
// engine has and under what name (configs.MetricNames.Extras).
const (
	MetricPromptTokens       = configs.ExtraPromptTokens
	MetricPrefixCacheQueries = configs.ExtraPrefixCacheQueries
	MetricRequestSuccess     = configs.ExtraRequestSuccess
	MetricE2ELatencySum      = configs.ExtraE2ELatencySum
	MetricE2ELatencyCount    = configs.ExtraE2ELatencyCount
	MetricQueueTimeSum       = configs.ExtraQueueTimeSum
	MetricQueueTimeCount     = configs.ExtraQueueTimeCount
	MetricPrefixCacheHits    = configs.ExtraPrefixCacheHits
	MetricPrefillTimeSum     = configs.ExtraPrefillTimeSum
	MetricPrefillTimeCount   = configs.ExtraPrefillTimeCount
	// MetricProcessStart is the engine process's start time (Prometheus
	// clients export it by default): when it is there, a counter reset is
	// believed only if it changed.
	MetricProcessStart = configs.ExtraProcessStart
)

var extraNames = []string{
	MetricPromptTokens, MetricPrefixCacheQueries, MetricRequestSuccess,
	MetricE2ELatencySum, MetricE2ELatencyCount,
	MetricQueueTimeSum, MetricQueueTimeCount, MetricProcessStart,
	MetricPrefixCacheHits, MetricPrefillTimeSum, MetricPrefillTimeCount,
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
	// Extra holds the Metric* names above that the scrape had, by their
	// canonical name.
	Extra map[string]float64 `json:"extra,omitempty"`
	// Decode holds the decode-stall rule's counters; nil when the engine
	// does not export all three (the rule is then off).
	Decode *DecodeCounters `json:"decode,omitempty"`
	// Ranks holds each data-parallel rank's own values, by the value of
	// the rank label, when the scrape has more than one rank (nil
	// otherwise): summed counters hide one hung rank behind the others.
	Ranks map[string]*Rank `json:"ranks,omitempty"`
}

// DecodeCounters tell first tokens from decode tokens.
type DecodeCounters struct {
	// FirstTokens: requests that got their first token (prefill done).
	FirstTokens float64 `json:"first_tokens"`
	// Generation: every output token, first tokens included.
	Generation float64 `json:"generation_tokens"`
	// Finished: requests finished other than by abort.
	Finished float64 `json:"finished"`
	// Aborted: requests finished by abort (their client went away), the
	// finished counter's finished_reason="abort" series; AbortsKnown is
	// false when the engine has no such series. A request that got its
	// first token and was then aborted owes no decode: without this count
	// it would look owed for ever.
	Aborted     float64 `json:"aborted,omitempty"`
	AbortsKnown bool    `json:"aborts_known,omitempty"`
}

// DecodeTokens are the output tokens after the first: the work a decode
// step does.
func (d *DecodeCounters) DecodeTokens() float64 { return d.Generation - d.FirstTokens }

// Rank is one data-parallel rank's share of a scrape.
type Rank struct {
	Waiting float64 `json:"waiting"`
	Running float64 `json:"running"`
	// Counters holds the rank's series of every progress and heartbeat
	// counter, by name.
	Counters map[string]float64 `json:"counters"`
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
	// Kind is the engine kind whose names the scrape was read by ("" when
	// engine.kind is auto and no scrape has shown which engine it is).
	Kind string `json:"kind,omitempty"`
	// Families, set only when a required metric was missing, are the
	// metric families the scrape did have: what an unknown engine exports.
	Families []string `json:"families,omitempty"`
}

// Readable reports whether the scrape gave usable values.
func (m MetricsObservation) Readable() bool { return m.OK() && m.Metrics != nil }

// Scrape returns the /metrics probe for the given metric names.
func Scrape(names configs.MetricNames) ProbeFn[MetricsObservation] {
	return func(ctx context.Context, t Target) MetricsObservation {
		return scrape(ctx, t, func(map[string]*dto.MetricFamily) (configs.MetricNames, string) { return names, "" })
	}
}

// pickNames chooses the names to read a scrape by, from its families, and
// says which engine kind they are ("" if not known).
type pickNames func(fams map[string]*dto.MetricFamily) (configs.MetricNames, string)

func scrape(ctx context.Context, t Target, pick pickNames) MetricsObservation {
	obs, fams := fetchFamilies(ctx, t)
	out := MetricsObservation{Observation: obs}
	if !obs.OK() {
		return out
	}
	names, kind := pick(fams)
	out.Kind = kind
	m, missing, required, err := extract(fams, names)
	out.Missing = missing
	if err == nil && len(required) > 0 {
		out.Families = FamilyNames(fams)
		err = fmt.Errorf("metrics: missing %s; the scrape has %s", strings.Join(required, ", "), familyWords(out.Families))
	}
	if err != nil {
		out.Class, out.Error = ClassOther, err.Error()
		return out
	}
	out.Metrics = &m
	return out
}

// fetchFamilies gets and parses one scrape. A failed request, a body that
// is not a text scrape or does not parse is a failed observation.
func fetchFamilies(ctx context.Context, t Target) (Observation, map[string]*dto.MetricFamily) {
	req, err := http.NewRequest(http.MethodGet, t.url(EndpointMetrics), nil)
	if err != nil {
		return fail(Observation{Endpoint: EndpointMetrics}, err), nil
	}
	// Ask for the classic text format: it is what vLLM serves and what
	// the text parser reads; a server that answers protobuf is refused
	// below rather than misread.
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,*/*;q=0.1")
	obs, hdr, body := do(ctx, t, req, EndpointMetrics)
	if !obs.OK() {
		return obs, nil
	}
	if ct := hdr.Get("Content-Type"); ct != "" {
		mt, _, _ := mime.ParseMediaType(ct)
		if mt != "text/plain" && mt != "application/openmetrics-text" && mt != "" {
			obs.Class, obs.Error = ClassOther, fmt.Sprintf("metrics: unexpected content type %q: %s", ct, snippet(body))
			return obs, nil
		}
	}
	fams, err := parseFamilies(bytes.NewReader(body))
	if err != nil {
		obs.Class, obs.Error = ClassOther, err.Error()
		return obs, nil
	}
	return obs, fams
}

// FamilyNames lists the metric families of a parsed scrape, sorted.
func FamilyNames(fams map[string]*dto.MetricFamily) []string {
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// familyWords names the families of a scrape for an error line, the
// first few in full: enough to tell which engine it is.
func familyWords(fams []string) string {
	const show = 12
	if len(fams) <= show {
		return fmt.Sprintf("%d families: %s", len(fams), strings.Join(fams, ", "))
	}
	return fmt.Sprintf("%d families: %s and %d more", len(fams), strings.Join(fams[:show], ", "), len(fams)-show)
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
	m, missing, required, err := extract(fams, names)
	if err != nil {
		return Metrics{}, missing, err
	}
	if len(required) > 0 {
		return Metrics{}, missing, fmt.Errorf("metrics: missing %s", strings.Join(required, ", "))
	}
	return m, missing, nil
}

// extract reads names out of a parsed scrape. required lists the missing
// names that make it unreadable; m is then the zero value.
func extract(fams map[string]*dto.MetricFamily, names configs.MetricNames) (m Metrics, missing, required []string, err error) {
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
		v, ok, verr := lookup(fams, names.ExtraName(n))
		if verr != nil && err == nil {
			err = verr
		}
		if ok {
			m.Extra[n] = v
		}
	}
	if d := names.Decode; d.FirstTokens != "" && d.GenerationTokens != "" && d.Finished != "" {
		first, ok1, err1 := lookup(fams, d.FirstTokens)
		gen, ok2, err2 := lookup(fams, d.GenerationTokens)
		fin, ok3, err3 := lookupWhere(fams, d.Finished, notAborted)
		if err == nil {
			err = errors.Join(err1, err2, err3)
		}
		if ok1 && ok2 && ok3 {
			m.Decode = &DecodeCounters{FirstTokens: first, Generation: gen, Finished: fin}
			// The abort series is optional: the rule without it is as it
			// was, and says so (decodeScan).
			if ab, ok, aerr := lookupWhere(fams, d.Finished, aborted); aerr == nil && ok {
				m.Decode.Aborted, m.Decode.AbortsKnown = ab, true
			}
		}
		for _, x := range []struct {
			name string
			ok   bool
		}{{d.FirstTokens, ok1}, {d.GenerationTokens, ok2}, {d.Finished, ok3}} {
			if !x.ok && !slices.Contains(missing, x.name) {
				missing = append(missing, x.name)
			}
		}
	}
	if names.RankLabel != "" {
		ranks, rerr := perRank(fams, names)
		if err == nil {
			err = rerr
		}
		m.Ranks = ranks
	}
	if err != nil || len(required) > 0 {
		return Metrics{}, missing, required, err
	}
	return m, missing, nil, nil
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
	return lookupWhere(fams, name, nil)
}

// lookupWhere sums the series of name that keep accepts (all when keep is
// nil).
func lookupWhere(fams map[string]*dto.MetricFamily, name string, keep func(*dto.Metric) bool) (sum float64, ok bool, err error) {
	err = eachSeries(fams, name, func(mt *dto.Metric, v float64) {
		if keep == nil || keep(mt) {
			sum += v
			ok = true
		}
	})
	if err != nil {
		return 0, false, err
	}
	return sum, ok, nil
}

// eachSeries calls fn with every series of name and its value: a plain
// sample, or a histogram's or summary's count or sum when name ends in
// _count or _sum. A non-finite value is an error.
func eachSeries(fams map[string]*dto.MetricFamily, name string, fn func(mt *dto.Metric, v float64)) error {
	if name == "" {
		return nil
	}
	pick := plainValue
	mf := fams[name]
	if mf == nil {
		base, suffix, cut := cutSuffix(name)
		if !cut {
			return nil
		}
		mf = fams[base]
		if mf == nil || (mf.GetType() != dto.MetricType_HISTOGRAM && mf.GetType() != dto.MetricType_SUMMARY &&
			mf.GetType() != dto.MetricType_GAUGE_HISTOGRAM) {
			return nil
		}
		if suffix == "_count" {
			pick = sampleCount
		} else {
			pick = sampleSum
		}
	}
	for _, mt := range mf.GetMetric() {
		v, ok := pick(mt)
		if !ok {
			// A histogram cut short before its _count or _sum line: the
			// series is missing, never zero (a zero would read as a reset).
			continue
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("metrics: %s has a non-finite value (%v)", name, v)
		}
		fn(mt, v)
	}
	return nil
}

// notAborted keeps the series of a finished-requests counter whose
// finished_reason is not "abort".
func notAborted(mt *dto.Metric) bool { return !aborted(mt) }

// aborted keeps the finished_reason="abort" series.
func aborted(mt *dto.Metric) bool { return labelValue(mt, "finished_reason") == "abort" }

func labelValue(mt *dto.Metric, name string) string {
	for _, l := range mt.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// perRank splits waiting, running and every progress and heartbeat
// counter by the rank label. It returns nil unless the waiting gauge has
// at least two ranks: one engine is judged by the sums alone.
func perRank(fams map[string]*dto.MetricFamily, names configs.MetricNames) (map[string]*Rank, error) {
	ranks := map[string]*Rank{}
	rank := func(mt *dto.Metric) *Rank {
		id := labelValue(mt, names.RankLabel)
		if id == "" {
			return nil
		}
		r := ranks[id]
		if r == nil {
			r = &Rank{Counters: map[string]float64{}}
			ranks[id] = r
		}
		return r
	}
	err := eachSeries(fams, names.Waiting, func(mt *dto.Metric, v float64) {
		if r := rank(mt); r != nil {
			r.Waiting += v
		}
	})
	if err != nil || len(ranks) < 2 {
		return nil, err
	}
	known := func(mt *dto.Metric) *Rank { return ranks[labelValue(mt, names.RankLabel)] }
	err = eachSeries(fams, names.Running, func(mt *dto.Metric, v float64) {
		if r := known(mt); r != nil {
			r.Running += v
		}
	})
	if err != nil {
		return nil, err
	}
	for _, name := range append(slices.Clone(names.Progress), names.Heartbeats...) {
		err := eachSeries(fams, name, func(mt *dto.Metric, v float64) {
			if r := known(mt); r != nil {
				r.Counters[name] += v
			}
		})
		if err != nil {
			return nil, err
		}
	}
	return ranks, nil
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
func plainValue(mt *dto.Metric) (float64, bool) {
	switch {
	case mt.Counter != nil:
		return mt.GetCounter().GetValue(), true
	case mt.Gauge != nil:
		return mt.GetGauge().GetValue(), true
	case mt.Untyped != nil:
		return mt.GetUntyped().GetValue(), true
	}
	return sampleCount(mt)
}

// sampleCount is a histogram's or summary's count; ok is false when the
// scrape had no _count line for the series.
func sampleCount(mt *dto.Metric) (float64, bool) {
	if h := mt.GetHistogram(); h != nil {
		switch {
		case h.SampleCountFloat != nil:
			return h.GetSampleCountFloat(), true
		case h.SampleCount != nil:
			return float64(h.GetSampleCount()), true
		}
		return 0, false
	}
	if s := mt.GetSummary(); s != nil && s.SampleCount != nil {
		return float64(s.GetSampleCount()), true
	}
	return 0, false
}

// sampleSum is a histogram's or summary's sum; ok is false when the
// scrape had no _sum line for the series.
func sampleSum(mt *dto.Metric) (float64, bool) {
	if h := mt.GetHistogram(); h != nil && h.SampleSum != nil {
		return h.GetSampleSum(), true
	}
	if s := mt.GetSummary(); s != nil && s.SampleSum != nil {
		return s.GetSampleSum(), true
	}
	return 0, false
}
