package watchdog

import (
	"encoding/json"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/probes"
)

// RetryStormCheck compares, over a window, how fast prompt tokens rise
// with how fast prefix-cache queries rise (docs/design.md section 2). Queries
// count at admission, prompt tokens only at a prefill's first output
// token: when clients give up and retry, the engine admits and prefills
// for callers that already left, and prompt tokens fall far behind.
type RetryStormCheck struct {
	Window             time.Duration `json:"-"`
	PromptTokens       float64       `json:"prompt_tokens_delta"`
	PrefixCacheQueries float64       `json:"prefix_cache_queries_delta"`
	// Ratio is PromptTokens / PrefixCacheQueries (0 when not judged).
	Ratio float64 `json:"ratio"`
	// Judged: the window had enough queries (MinQueries) to judge.
	Judged bool `json:"judged"`
	// Alarm: judged, and Ratio below the configured ratio.
	Alarm bool `json:"alarm"`
	// Read: two readable samples in the window carried both counters, so
	// the deltas are figures (false on an engine without them, llama.cpp:
	// its deltas are then unknown, not 0).
	Read bool `json:"-"`
}

// MarshalJSON writes the window in seconds; the deltas only when they were
// read and the ratio only when judged, so no unknown figure reads as 0.
func (c RetryStormCheck) MarshalJSON() ([]byte, error) {
	out := struct {
		PromptTokens       *float64 `json:"prompt_tokens_delta,omitempty"`
		PrefixCacheQueries *float64 `json:"prefix_cache_queries_delta,omitempty"`
		Ratio              *float64 `json:"ratio,omitempty"`
		Judged             bool     `json:"judged"`
		Alarm              bool     `json:"alarm"`
		Window             *float64 `json:"window_seconds,omitempty"`
	}{Judged: c.Judged, Alarm: c.Alarm}
	if c.Read {
		w := c.Window.Seconds()
		out.PromptTokens, out.PrefixCacheQueries, out.Window = &c.PromptTokens, &c.PrefixCacheQueries, &w
	}
	if c.Judged {
		out.Ratio = &c.Ratio
	}
	return json.Marshal(out)
}

// CheckRetryStorm runs the retry-storm check over the readable samples
// within cfg.Window before the last one, never across a counter reset.
func CheckRetryStorm(history []Sample, cfg configs.RetryStorm) RetryStormCheck {
	var c RetryStormCheck
	first, last := extraSpan(history, cfg.Window, probes.MetricPromptTokens, probes.MetricPrefixCacheQueries)
	if first == nil {
		return c
	}
	a, b := first.Metrics.Metrics.Extra, last.Metrics.Metrics.Extra
	c.Read = true
	c.Window = last.At.Sub(first.At)
	c.PromptTokens = b[probes.MetricPromptTokens] - a[probes.MetricPromptTokens]
	c.PrefixCacheQueries = b[probes.MetricPrefixCacheQueries] - a[probes.MetricPrefixCacheQueries]
	if c.PrefixCacheQueries > 0 && c.PrefixCacheQueries >= cfg.MinQueries {
		c.Judged = true
		c.Ratio = c.PromptTokens / c.PrefixCacheQueries
		c.Alarm = c.Ratio < cfg.Ratio
	}
	return c
}

// InFlight is Little's law over the window: requests completed per second
// times their mean end-to-end latency. It is the work the engine genuinely
// held (queued and executing) on average; ok is false without completions
// in the window. LoadOver gives the full picture.
func InFlight(history []Sample, window time.Duration) (inFlight float64, ok bool) {
	l, ok := LoadOver(history, window)
	return l.InFlight, ok
}

// extraSpan finds the earliest and the last readable samples within window
// that both carry the named extra metrics, with no decrease of them in
// between (a decrease is an engine restart: the span starts after it).
func extraSpan(history []Sample, window time.Duration, names ...string) (first, last *Sample) {
	has := func(s *Sample) bool {
		if !s.readable() {
			return false
		}
		for _, n := range names {
			if _, ok := s.Metrics.Metrics.Extra[n]; !ok {
				return false
			}
		}
		return true
	}
	for i := len(history) - 1; i >= 0; i-- {
		if s := &history[i]; has(s) {
			last = s
			break
		}
	}
	if last == nil {
		return nil, nil
	}
	next := last
	for i := len(history) - 1; i >= 0; i-- {
		s := &history[i]
		if s == last || !has(s) || s.At.After(last.At) {
			continue
		}
		if s.At.Before(last.At.Add(-window)) {
			break
		}
		decreased := false
		for _, n := range names {
			if next.Metrics.Metrics.Extra[n] < s.Metrics.Metrics.Extra[n] {
				decreased = true
			}
		}
		if decreased {
			break
		}
		first, next = s, s
	}
	if first == nil {
		return nil, nil
	}
	return first, last
}
