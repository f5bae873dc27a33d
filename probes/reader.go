package probes

import (
	"context"
	"fmt"
	"io"

	dto "github.com/prometheus/client_model/go"

	"github.com/vigil-dev/vigil/configs"
)

// Reader reads an engine's /metrics by its profile: the watchdog's scrape
// and the admission limiter's load both go through one, so the two never
// disagree on which engine it is or what its series are called. With
// engine.kind auto it reads vLLM's names (with the file's own keys) until a
// scrape's families show the engine, then that engine's profile for good.
type Reader struct {
	pick pickNames
	kind func() string
}

// NewReader reads by names for a known kind; for configs.KindAuto with
// resolve set, names stand in until a scrape shows the kind and resolve
// gives its names.
func NewReader(names configs.MetricNames, kind string, resolve func(string) configs.MetricNames) *Reader {
	if kind == configs.KindAuto && resolve != nil {
		en := newEngineNames(names, resolve)
		return &Reader{pick: en.pick, kind: en.current}
	}
	fixed := func(map[string]*dto.MetricFamily) (configs.MetricNames, string) { return names, kind }
	return &Reader{pick: fixed, kind: func() string { return kind }}
}

// Kind is the engine kind the scrapes are read as ("" while auto has not
// seen one).
func (r *Reader) Kind() string { return r.kind() }

// Load is what the admission limiter reads of one scrape: the queue gauges,
// and the series that tell an engine busy prefilling long prompts from one
// that cannot take more. Every value is summed over its series (one per
// data-parallel rank); -1 is a series the engine does not have.
type Load struct {
	Waiting, Running float64
	// KVUsage is the KV cache's used share (0..1), the mean over ranks.
	KVUsage float64
	// PromptTokens and FirstTokens are counters: prompt tokens prefilled
	// and prefills completed (first tokens). CachedTokens counts prompt
	// tokens found in the prefix cache, which the engine does not prefill.
	PromptTokens, FirstTokens, CachedTokens float64
}

// Read scrapes t's /metrics as the watchdog's probe does (the same
// request, limits and checks) and reads the limiter's figures from it.
// The error names the endpoint and never holds t's API key.
func (r *Reader) Read(ctx context.Context, t Target) (Load, error) {
	obs, fams := fetchFamilies(ctx, t)
	if !obs.OK() {
		return Load{}, fmt.Errorf("%s: %s", EndpointMetrics, obs.Error)
	}
	ld, err := r.load(fams)
	if err != nil {
		return Load{}, fmt.Errorf("%s: %w", EndpointMetrics, err)
	}
	return ld, nil
}

// Load parses one scrape into the limiter's figures. Only the waiting
// gauge is required: without it there is no queue to read.
func (r *Reader) Load(body io.Reader) (Load, error) {
	fams, err := parseFamilies(body)
	if err != nil {
		return Load{}, err
	}
	return r.load(fams)
}

func (r *Reader) load(fams map[string]*dto.MetricFamily) (Load, error) {
	var err error
	names, _ := r.pick(fams)
	out := Load{KVUsage: -1, PromptTokens: -1, FirstTokens: -1, CachedTokens: -1}
	var ok bool
	if out.Waiting, ok, err = lookup(fams, names.Waiting); err != nil {
		return Load{}, err
	} else if !ok {
		return Load{}, fmt.Errorf("metrics: missing %s (engine.metrics.waiting)", names.Waiting)
	}
	if out.Running, _, err = lookup(fams, names.Running); err != nil {
		return Load{}, err
	}
	first := func(canonical string, mean bool) (float64, error) {
		for _, name := range names.ExtraNames(canonical) {
			var sum float64
			n := 0
			if err := eachSeries(fams, name, func(_ *dto.Metric, v float64) { sum += v; n++ }); err != nil {
				return -1, err
			}
			if n == 0 {
				continue
			}
			if mean {
				return sum / float64(n), nil
			}
			return sum, nil
		}
		return -1, nil
	}
	for _, x := range []struct {
		to        *float64
		canonical string
		mean      bool
	}{
		{&out.KVUsage, configs.ExtraKVUsage, true},
		{&out.PromptTokens, configs.ExtraPromptTokens, false},
		{&out.FirstTokens, configs.ExtraFirstTokens, false},
		{&out.CachedTokens, configs.ExtraPrefixCacheHits, false},
	} {
		if *x.to, err = first(x.canonical, x.mean); err != nil {
			return Load{}, err
		}
	}
	return out, nil
}
