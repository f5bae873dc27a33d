package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/alerts"
	"github.com/vigil-dev/vigil/status"
	"github.com/vigil-dev/vigil/watchdog"
)

// statusOff is the --status value that reads no vigil.
const statusOff = "off"

// localVigil is the vigil running beside the engine, whose limiter's
// counts diagnose reads from its /status at every sample: an engine whose
// API server answers no probe while it streams the calls vigil proxies is
// starved, not wedged, and only the limiter sees those calls.
type localVigil struct {
	url string // the status listener's base URL
	c   *status.Client
}

func (v *localVigil) String() string { return "the vigil at " + v.url }

// statusDoc is the part of a vigil's /status diagnose reads.
type statusDoc struct {
	At          time.Time             `json:"at"`
	Engine      string                `json:"engine"`
	Limiter     json.RawMessage       `json:"limiter"`
	LimiterLoad *watchdog.LimiterLoad `json:"limiter_load"`
}

// read reads /status; an answer that is not a vigil's status document is
// an error naming the URL.
func (v *localVigil) read(ctx context.Context) (statusDoc, error) {
	raw, err := v.c.Status(ctx)
	var none *status.NoAnswerError
	switch {
	case errors.As(err, &none):
		return statusDoc{}, err
	case err != nil:
		return statusDoc{}, fmt.Errorf("%w: not a vigil status document", err)
	}
	var doc statusDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		return statusDoc{}, fmt.Errorf("%s/status: not a vigil status document: %v", v.url, err)
	}
	if doc.At.IsZero() {
		return statusDoc{}, fmt.Errorf("%s/status: not a vigil status document: no \"at\" time", v.url)
	}
	return doc, nil
}

// ReadLimiter is the limiter's counts now.
func (v *localVigil) ReadLimiter(ctx context.Context) (watchdog.LimiterLoad, error) {
	doc, err := v.read(ctx)
	if err != nil {
		return watchdog.LimiterLoad{}, err
	}
	if doc.LimiterLoad == nil {
		return watchdog.LimiterLoad{}, fmt.Errorf("%s/status: no limiter_load (the limiter is off?)", v.url)
	}
	return *doc.LimiterLoad, nil
}

// statusURL is the base URL of the vigil diagnose reads: --status, else
// the config's status.listen; "" for none (--status off, or --engine
// alone). A malformed --status is an error naming it.
func statusURL(flagValue, configFile, listen string) (string, error) {
	v := flagValue
	switch {
	case v == statusOff:
		return "", nil
	case v == "" && configFile != "":
		v = listen
	}
	if v == "" {
		return "", nil
	}
	if !strings.Contains(v, "://") {
		v = "http://" + v
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("--status %q: want the local vigil's status listener, e.g. http://127.0.0.1:9108 (or %s)", flagValue, statusOff)
	}
	if u.User != nil {
		// vigil's status listener takes no credentials, and the URL is
		// printed in the report.
		return "", fmt.Errorf("--status %s: no credentials in the URL: the status listener takes none", u.Redacted())
	}
	return strings.TrimRight(v, "/"), nil
}

// findVigil reads the vigil at base once, before sampling: a source for
// its limiter's counts, or the line that says why none are counted (no
// vigil answers there, it runs no limiter, it watches another engine). The
// error is for an answer that is not a vigil's /status.
func findVigil(ctx context.Context, base, engineURL string) (watchdog.LimiterSource, string, error) {
	v := &localVigil{url: base, c: status.NewClient(base)}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	doc, err := v.read(ctx)
	var none *status.NoAnswerError
	switch {
	case errors.As(err, &none):
		return nil, fmt.Sprintf("no vigil at %s: the limiter's traffic is not counted (%v)", base, none.Err), nil
	case err != nil:
		return nil, "", fmt.Errorf("%w; --status %s judges the engine alone", err, statusOff)
	case doc.Engine != "" && !sameEngine(doc.Engine, engineURL):
		return nil, fmt.Sprintf("the vigil at %s watches %s, not %s: its limiter's traffic is not counted",
			base, doc.Engine, alerts.DisplayURL(engineURL)), nil
	case doc.LimiterLoad == nil && len(doc.Limiter) > 0 && string(doc.Limiter) != "null":
		return nil, fmt.Sprintf("the vigil at %s does not report its limiter's counts (older than this diagnose): the limiter's traffic is not counted", base), nil
	case doc.LimiterLoad == nil:
		return nil, fmt.Sprintf("the vigil at %s runs no admission limiter: no traffic through it to count", base), nil
	}
	return v, "", nil
}

// sameEngine reports whether two engine URLs name one engine: same
// scheme, port and path, and the same host, any loopback name being one.
func sameEngine(a, b string) bool {
	ua, errA := url.Parse(a)
	ub, errB := url.Parse(b)
	if errA != nil || errB != nil {
		return a == b
	}
	host := func(u *url.URL) string {
		h := u.Hostname()
		if h == "localhost" {
			return "loopback"
		}
		if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() {
			return "loopback"
		}
		return h
	}
	return ua.Scheme == ub.Scheme && ua.Port() == ub.Port() && host(ua) == host(ub) &&
		strings.TrimRight(ua.Path, "/") == strings.TrimRight(ub.Path, "/")
}
