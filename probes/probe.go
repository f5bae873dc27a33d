package probes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

// ProbeFn is one probe kind: it observes t once and reports what it saw.
// It never returns an error; failures are classified in the observation.
type ProbeFn[O any] func(ctx context.Context, t Target) O

// Target is the engine a probe talks to.
type Target struct {
	// URL is the engine's base URL, without the /v1 suffix.
	URL string
	// APIKey is sent as "Authorization: Bearer <key>" when set. It never
	// appears in an observation or an error.
	APIKey configs.Secret
	// Timeout bounds one request (0: only the context bounds it).
	Timeout time.Duration
	// HTTP is the client to use; nil means a shared default client.
	HTTP *http.Client
}

// EngineTarget is the engine at upstream, its base URL (query and fragment
// dropped), over tr, with key sent when set.
func EngineTarget(upstream *url.URL, tr http.RoundTripper, key configs.Secret) Target {
	u := *upstream
	u.RawQuery, u.Fragment = "", ""
	return Target{URL: u.String(), APIKey: key, HTTP: &http.Client{Transport: tr}}
}

var defaultClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}

func (t Target) client() *http.Client {
	if t.HTTP != nil {
		return t.HTTP
	}
	return defaultClient
}

func (t Target) url(path string) string { return strings.TrimRight(t.URL, "/") + path }

// ErrorClass says how a probe failed. The watchdog's rules are written in
// these terms: refused and reset count toward "down", timeout does not.
type ErrorClass string

// The error classes. ClassNone means the probe succeeded.
const (
	ClassNone ErrorClass = ""
	// ClassRefused: nothing listens on the port (crashed, or still loading).
	ClassRefused ErrorClass = "refused"
	// ClassReset: the connection was reset or closed with no (or a cut)
	// reply, what curl calls "empty reply from server".
	ClassReset ErrorClass = "reset"
	// ClassTimeout: no answer within the probe's timeout.
	ClassTimeout ErrorClass = "timeout"
	// ClassHTTPStatus: an answer with an unexpected status; see Code.
	ClassHTTPStatus ErrorClass = "http_status"
	// ClassOther: anything else (bad body, DNS, TLS, a cancelled context).
	ClassOther ErrorClass = "other"
)

// Observation is what every probe reports: which endpoint, how long it
// took and, when it failed, how.
type Observation struct {
	Endpoint string `json:"endpoint"`
	// Code is the HTTP status, 0 if no response arrived.
	Code    int           `json:"code,omitempty"`
	Class   ErrorClass    `json:"class,omitempty"`
	Latency time.Duration `json:"latency"`
	// Error describes the failure in one line ("" on success). It never
	// contains the API key.
	Error string `json:"error,omitempty"`
}

// OK reports whether the probe succeeded.
func (o Observation) OK() bool { return o.Class == ClassNone && o.Endpoint != "" }

// Taken reports whether the observation was made at all (the zero value
// means "not probed").
func (o Observation) Taken() bool { return o.Endpoint != "" }

// Unauthorized reports a 401 or 403: the API key is wrong or missing, a
// configuration problem no restart can fix.
func (o Observation) Unauthorized() bool {
	return o.Class == ClassHTTPStatus && (o.Code == http.StatusUnauthorized || o.Code == http.StatusForbidden)
}

// ServerError reports a 5xx answer.
func (o Observation) ServerError() bool { return o.Class == ClassHTTPStatus && o.Code >= 500 }

// Unreachable reports the failures that mean "nothing is serving":
// refused, reset/empty reply, or a 5xx.
func (o Observation) Unreachable() bool {
	return o.Class == ClassRefused || o.Class == ClassReset || o.ServerError()
}

// String is the one-line outcome used in reasons and reports, e.g.
// "200 in 4ms", "503 in 2ms", "refused", "timeout after 10s".
func (o Observation) String() string {
	switch o.Class {
	case ClassNone:
		if !o.Taken() {
			return "not probed"
		}
		return fmt.Sprintf("%d in %s", o.Code, roundLatency(o.Latency))
	case ClassHTTPStatus:
		return fmt.Sprintf("%d in %s", o.Code, roundLatency(o.Latency))
	case ClassTimeout:
		return fmt.Sprintf("timeout after %s", roundLatency(o.Latency))
	case ClassRefused:
		return "refused"
	case ClassReset:
		return "reset (empty reply)"
	default:
		if o.Code != 0 {
			return fmt.Sprintf("%d, %s", o.Code, o.Error)
		}
		return "failed: " + o.Error
	}
}

// roundLatency keeps one-line outcomes readable: 4ms, 1.2s, 1m30s.
func roundLatency(d time.Duration) time.Duration {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Millisecond)
	default:
		return d.Round(time.Microsecond)
	}
}

// Class says how err failed. A context deadline or any net timeout is a
// timeout; ECONNREFUSED is refused; ECONNRESET, EPIPE and an EOF before
// any (or a complete) reply are reset.
func Class(err error) ErrorClass {
	if err == nil {
		return ClassNone
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ClassTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ClassTimeout
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return ClassRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return ClassReset
	}
	return ClassOther
}

// maxBody bounds what a probe reads: a real vLLM scrape is a few hundred
// kilobytes; anything near this is not a metrics page.
const maxBody = 32 << 20

// do runs one request and reads the whole body (bounded). It returns a
// filled observation and the body; on any failure the observation carries
// the class and the body may be nil.
func do(ctx context.Context, t Target, req *http.Request, endpoint string) (Observation, http.Header, []byte) {
	obs := Observation{Endpoint: endpoint}
	if t.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.Timeout)
		defer cancel()
	}
	req = req.WithContext(ctx)
	if t.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+t.APIKey.Value())
	}
	start := time.Now()
	resp, err := t.client().Do(req)
	if err != nil {
		obs.Latency = time.Since(start)
		return fail(obs, err), nil, nil
	}
	defer resp.Body.Close()
	obs.Code = resp.StatusCode
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	obs.Latency = time.Since(start)
	if err != nil {
		return fail(obs, fmt.Errorf("read body: %w", err)), resp.Header, nil
	}
	if len(body) > maxBody {
		obs.Class, obs.Error = ClassOther, fmt.Sprintf("body larger than %d bytes", maxBody)
		return obs, resp.Header, nil
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		obs.Class = ClassHTTPStatus
		obs.Error = fmt.Sprintf("%s: %s", resp.Status, snippet(body))
		return obs, resp.Header, body
	}
	return obs, resp.Header, body
}

func fail(obs Observation, err error) Observation {
	obs.Class = Class(err)
	obs.Error = errorLine(err)
	return obs
}

// errorLine flattens err to one line. url.Error already omits headers, so
// the API key cannot leak through it.
func errorLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// snippet is the start of a body, on one line, for error messages.
func snippet(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	if s == "" {
		s = "(empty body)"
	}
	return s
}
