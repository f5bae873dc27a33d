package probes

import (
	"context"
	"net/http"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

// Config is everything a Client needs.
type Config struct {
	// Target is the engine; its Timeout bounds /v1/models, /health and
	// /metrics.
	Target Target
	// Names are the metrics the scrape reads.
	Names configs.MetricNames
	// Kind is engine.kind. With "auto" and Resolve set, Names stand in
	// until a scrape shows which engine it is; Resolve then gives that
	// kind's names.
	Kind    string
	Resolve func(kind string) configs.MetricNames
	// Reader, when set, is the engine reader to share (the daemon gives
	// the limiter the same one); nil builds one from Names, Kind and
	// Resolve.
	Reader *Reader
	// ProbeTimeout bounds the completion probe.
	ProbeTimeout time.Duration
	// Now is the clock for the completion probe's age (nil: time.Now).
	Now func() time.Time
}

// FromConfig builds a Config from vigil's engine and watchdog sections.
func FromConfig(e configs.Engine, w configs.Watchdog) Config {
	return Config{
		Target: Target{
			URL:     e.URL,
			APIKey:  e.APIKey,
			Timeout: e.RequestTimeout,
			// Own transport: a probe must not share idle connections
			// with anything else in the process.
			HTTP: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
		},
		Names:        e.Metrics,
		Kind:         e.Kind,
		Resolve:      e.MetricsFor,
		ProbeTimeout: w.ProbeTimeout,
	}
}

// Client runs every probe against one engine. Its method set is what the
// watchdog's cycle asks for.
type Client struct {
	target     Target
	scrape     ProbeFn[MetricsObservation]
	completion *CompletionProber
	kind       func() string
}

// NewClient returns a Client; Close it to stop a probe in flight.
func NewClient(c Config) *Client {
	r := c.Reader
	if r == nil {
		r = NewReader(c.Names, c.Kind, c.Resolve)
	}
	return &Client{
		target:     c.Target,
		scrape:     func(ctx context.Context, t Target) MetricsObservation { return scrape(ctx, t, r.pick) },
		completion: NewCompletionProber(c.Target, c.ProbeTimeout, c.Now),
		kind:       r.Kind,
	}
}

// Kind is the engine kind the scrapes are read as: engine.kind, or with
// auto the kind a scrape has shown ("" until one has).
func (c *Client) Kind() string { return c.kind() }

// Models probes /v1/models.
func (c *Client) Models(ctx context.Context) ModelsObservation { return Models(ctx, c.target) }

// Health probes /health.
func (c *Client) Health(ctx context.Context) Observation { return Health(ctx, c.target) }

// Metrics scrapes /metrics.
func (c *Client) Metrics(ctx context.Context) MetricsObservation { return c.scrape(ctx, c.target) }

// StartCompletion starts a completion probe for model unless one is
// outstanding.
func (c *Client) StartCompletion(model string) bool { return c.completion.Start(model) }

// PollCompletion reports the completion probe in flight or the last one.
func (c *Client) PollCompletion() CompletionStatus { return c.completion.Poll() }

// Close stops a completion probe in flight.
func (c *Client) Close() { c.completion.Close() }
