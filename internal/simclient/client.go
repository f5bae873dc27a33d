package simclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RetryPolicy is how a caller retries, every duration in engine time. The
// zero value makes one attempt without a timeout.
type RetryPolicy struct {
	// MaxRetries is how many retries may follow the first attempt (the
	// SDKs' max_retries).
	MaxRetries int
	// Timeout bounds one attempt, from sending to the last byte; 0 = none.
	Timeout time.Duration
	// BackoffMin and BackoffMax bound the uniform wait before a retry when
	// the server gave no usable Retry-After.
	BackoffMin, BackoffMax time.Duration
	// MaxRetryAfter is the longest server-requested wait honoured; a longer
	// (or zero) one falls back to the backoff, as the OpenAI SDKs ignore
	// any Retry-After over 60 s.
	MaxRetryAfter time.Duration
	// TimeoutUntilHeaders makes Timeout bound the attempt only until the
	// answer's headers arrive, as the OpenAI Node SDK's timeout does (it
	// is cleared when fetch resolves): a stream, whose headers an engine
	// sends at once, is then read to its end without it. Off, Timeout runs
	// to the last byte. A unary answer's headers come with its body, so
	// for unary calls the two differ only by the body's read time.
	TimeoutUntilHeaders bool
}

// Request is one call: the same body (and key) is sent on every attempt.
type Request struct {
	Body []byte
	// Key is sent as Idempotency-Key on every attempt; empty sends none.
	Key string
	// Stream reads the answer as server-sent events.
	Stream bool
}

// Result is what happened to one call. Times are engine time since the
// caller's clock started.
type Result struct {
	Start, End time.Duration
	// Delivered is set when an attempt got a complete 200 answer (for a
	// stream, up to "data: [DONE]"); DeliveredAt is when it ended.
	Delivered   bool
	DeliveredAt time.Duration
	// TTFT is the delivered stream's time to its first data event, from
	// the start of the call.
	TTFT time.Duration
	// Attempts counts attempts sent; Timeouts those cut by the attempt
	// timeout; Statuses the non-200 answers by status code.
	Attempts int
	Timeouts int
	Errors   int // transport errors other than timeouts
	Statuses map[int]int
	// Tokens counts streamed data events of the delivered attempt.
	Tokens int
}

// Caller sends Requests to one URL the way the official OpenAI SDKs do:
// every attempt carries X-Stainless-Retry-Count and the call's
// Idempotency-Key; 408, 409, 429, 5xx, timeouts and connection errors are
// retried unless the answer says "x-should-retry: false" ("true" forces a
// retry); the wait is retry-after-ms, else Retry-After, when it is positive
// and at most MaxRetryAfter, else a uniform backoff.
type Caller struct {
	Client *http.Client
	URL    string
	// APIKey is sent as "Authorization: Bearer <key>" when not empty.
	APIKey string
	Clock  *Clock
	Policy RetryPolicy
	// HeaderScale converts the server's Retry-After into engine time: 1
	// when the server's clock is engine time, Clock.Scale when it runs on
	// the wall with durations scaled down (a limiter in front of a
	// time-scaled engine).
	HeaderScale float64
	// OmitTimeoutHeader leaves X-Stainless-Timeout out of every attempt,
	// as the OpenAI Node SDK does when its timeout is set on the client
	// rather than per request (the usual configuration): the server must
	// then infer the client's deadline. Off (the default, what the
	// benchmarks' figures were measured with), every attempt with a
	// timeout announces it, as the Python SDK does.
	OmitTimeoutHeader bool

	mu  sync.Mutex
	rng *rand.Rand
}

// NewCaller builds a caller with its own connection pool and a seeded
// source for its backoff jitter.
func NewCaller(url, apiKey string, clock *Clock, p RetryPolicy, seed uint64) *Caller {
	return &Caller{Client: NewHTTPClient(), URL: url, APIKey: apiKey, Clock: clock, Policy: p,
		HeaderScale: 1, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// NewHTTPClient is a client for many concurrent loopback requests: a large
// idle pool (so a burst does not churn through ephemeral ports), no
// compression, no overall timeout (attempts carry their own).
func NewHTTPClient() *http.Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr}
}

// CloseIdle closes the caller's idle connections.
func (c *Caller) CloseIdle() { c.Client.CloseIdleConnections() }

// Do makes the call, retrying per the policy, and reports what happened.
// ctx bounds the whole call (backoff waits included).
func (c *Caller) Do(ctx context.Context, req Request) Result {
	res := Result{Start: c.Clock.Now()}
	for n := 0; ; n++ {
		res.Attempts++
		a := c.attempt(ctx, req, n, res.Start)
		if a.ok {
			res.Delivered, res.DeliveredAt, res.TTFT, res.Tokens = true, c.Clock.Now(), a.ttft, a.tokens
			break
		}
		switch {
		case a.timeout:
			res.Timeouts++
		case a.err != nil:
			res.Errors++
		default:
			if res.Statuses == nil {
				res.Statuses = map[int]int{}
			}
			res.Statuses[a.status]++
		}
		if n >= c.Policy.MaxRetries || ctx.Err() != nil {
			break
		}
		retry, wait := c.decide(a)
		if !retry || !c.Clock.Sleep(ctx, wait) {
			break
		}
	}
	res.End = c.Clock.Now()
	return res
}

type attemptResult struct {
	ok      bool
	status  int
	header  http.Header
	err     error
	timeout bool
	ttft    time.Duration
	tokens  int
}

func (c *Caller) attempt(ctx context.Context, req Request, n int, callStart time.Duration) (a attemptResult) {
	actx := ctx
	// headersDue, when set, ends the attempt's timeout once the headers
	// are in (TimeoutUntilHeaders); it reports whether the timeout had
	// already fired.
	var headersDue func() bool
	switch {
	case c.Policy.Timeout > 0 && c.Policy.TimeoutUntilHeaders:
		var cancel context.CancelFunc
		actx, cancel = context.WithCancel(ctx)
		defer cancel()
		timer := time.AfterFunc(c.Clock.Wall(c.Policy.Timeout), cancel)
		defer timer.Stop()
		headersDue = func() bool { return !timer.Stop() }
	case c.Policy.Timeout > 0:
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, c.Clock.Wall(c.Policy.Timeout))
		defer cancel()
	}
	hr, err := http.NewRequestWithContext(actx, http.MethodPost, c.URL, bytes.NewReader(req.Body))
	if err != nil {
		return attemptResult{err: err}
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "application/json")
	hr.Header.Set("X-Stainless-Retry-Count", strconv.Itoa(n))
	if c.Policy.Timeout > 0 && !c.OmitTimeoutHeader {
		// The SDKs announce their timeout in seconds; it is sent in the
		// server's time, like the Retry-After it answers with.
		hr.Header.Set("X-Stainless-Timeout", strconv.FormatFloat(c.Policy.Timeout.Seconds()/c.headerScale(), 'f', -1, 64))
	}
	if req.Key != "" {
		hr.Header.Set("Idempotency-Key", req.Key)
	}
	if c.APIKey != "" {
		hr.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	defer func() {
		// An attempt that ran out of time is a timeout whatever the
		// transport called it (deadline while dialing, reading headers or
		// reading the body).
		if !a.ok && actx.Err() != nil && ctx.Err() == nil {
			a.timeout, a.err = true, actx.Err()
		}
	}()
	resp, err := c.Client.Do(hr)
	if err != nil {
		return attemptResult{err: err}
	}
	defer resp.Body.Close()
	if headersDue != nil && headersDue() {
		// The timeout fired as the headers came in: the attempt is cut.
		return attemptResult{timeout: true, err: context.DeadlineExceeded}
	}
	a.status, a.header = resp.StatusCode, resp.Header
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return a
	}
	if !req.Stream {
		var body struct {
			Choices []json.RawMessage `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			a.err = err
			return a
		}
		a.ok = len(body.Choices) > 0
		if !a.ok {
			a.err = errors.New("answer has no choices")
		}
		return a
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		data, found := strings.CutPrefix(line, "data: ")
		if !found {
			continue
		}
		if data == "[DONE]" {
			a.ok = true
			return a
		}
		if a.tokens == 0 {
			a.ttft = c.Clock.Now() - callStart
		}
		a.tokens++
	}
	a.err = sc.Err()
	if a.err == nil {
		a.err = io.ErrUnexpectedEOF // the stream ended without [DONE]
	}
	return a
}

// decide reports whether a failed attempt is retried and after how long
// (engine time), as the OpenAI SDKs do.
func (c *Caller) decide(a attemptResult) (bool, time.Duration) {
	switch {
	case a.timeout || a.status == 0:
		// Timeouts and connection errors are retried after the backoff.
		return true, c.backoff()
	case a.status == http.StatusOK:
		return false, 0 // a broken answer to a 200: the SDKs raise, no retry
	case !ShouldRetry(a.status, a.header):
		return false, 0
	}
	if ra, ok := RetryAfter(a.header, time.Now()); ok {
		ra = time.Duration(float64(ra) * c.headerScale())
		if ra > 0 && ra <= c.Policy.MaxRetryAfter {
			return true, ra
		}
	}
	return true, c.backoff()
}

func (c *Caller) headerScale() float64 {
	if c.HeaderScale > 0 {
		return c.HeaderScale
	}
	return 1
}

func (c *Caller) backoff() time.Duration {
	lo, hi := c.Policy.BackoffMin, c.Policy.BackoffMax
	if hi <= lo {
		return lo
	}
	c.mu.Lock()
	f := c.rng.Float64()
	c.mu.Unlock()
	return lo + time.Duration(f*float64(hi-lo))
}

// ShouldRetry is the SDKs' rule for an HTTP answer: x-should-retry wins,
// then 408, 409, 429 and 5xx are retried.
func ShouldRetry(status int, h http.Header) bool {
	switch h.Get("x-should-retry") {
	case "true":
		return true
	case "false":
		return false
	}
	return status == http.StatusRequestTimeout || status == http.StatusConflict ||
		status == http.StatusTooManyRequests || status >= 500
}

// RetryAfter reads the wait a server asked for, as the OpenAI SDKs do:
// retry-after-ms (float milliseconds) first, then Retry-After as float
// seconds or an HTTP date. ok is false when neither parses.
func RetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if h == nil {
		return 0, false
	}
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return t.Sub(now), true
	}
	return 0, false
}
