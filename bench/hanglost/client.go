package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/internal/simclient"
)

// client sends calls the way the OpenAI SDKs do, and keeps what each
// attempt read so the text can be checked: a 600 s timeout announced in
// X-Stainless-Timeout, X-Stainless-Retry-Count on every attempt, 2
// retries of timeouts, connection errors, 408, 409, 429 and 5xx (unless
// x-should-retry says otherwise), the wait from retry-after-ms or
// Retry-After when positive and at most 60 s, else the SDKs' backoff
// (0.5 s doubling to 8 s, less up to a quarter of jitter). An answer
// that began (200) and then broke, or a stream that ends with an error
// event, is raised, not retried, as the SDKs do. Times are engine time.
type client struct {
	http  *http.Client
	base  string
	clock *simclient.Clock
	// retries is how many times a call is retried (the SDKs': 2; 0: a
	// client that does not retry, as behind HAProxy, which never retries
	// a 503).
	retries int

	mu  sync.Mutex
	rng *rand.Rand
}

const (
	sdkTimeout       = 600 * time.Second
	sdkRetries       = 2
	sdkBackoffFirst  = 500 * time.Millisecond
	sdkBackoffMax    = 8 * time.Second
	sdkMaxRetryAfter = 60 * time.Second
)

func newClient(base string, clock *simclient.Clock, seed uint64, retries int) *client {
	return &client{http: simclient.NewHTTPClient(), base: base, clock: clock, retries: retries, rng: rand.New(rand.NewPCG(seed, 0xc11e))}
}

// outcome is how one attempt ended.
type outcome int

const (
	reset      outcome = iota // the connection failed or the answer broke off
	okAnswer                  // 200 and a whole answer (a stream up to one [DONE])
	timedOut                  // the attempt's timeout
	httpError                 // an error status (Status)
	errorEvent                // a 200 stream that carried an error event
	cancelled                 // the bench ended the call
)

func (o outcome) String() string {
	return [...]string{"reset", "answer", "timeout", "http error", "error event", "cancelled"}[o]
}

// attempt is what one attempt saw.
type attempt struct {
	start, end time.Duration
	outcome    outcome
	status     int
	// code is an error event's code, or an error answer's.
	code string
	text string
	// ids are the stream's distinct ids; dones its [DONE] events.
	ids   map[string]bool
	dones int
	// retryAfter is the wait asked for, when the answer asked one.
	retryAfter time.Duration
	retryable  bool
}

// result is what became of one call.
type result struct {
	start, end time.Duration
	attempts   []attempt
}

// delivered is the attempt that got the answer, or nil.
func (r *result) delivered() *attempt {
	for i := range r.attempts {
		if r.attempts[i].outcome == okAnswer {
			return &r.attempts[i]
		}
	}
	return nil
}

// do makes the call until it is answered, raised, or ctx ends.
func (c *client) do(ctx context.Context, cl call) result {
	res := result{start: c.clock.Now()}
	for n := 0; ; n++ {
		a := c.attempt(ctx, cl, n)
		res.attempts = append(res.attempts, a)
		if a.outcome == okAnswer || !a.retryable || n >= c.retries || ctx.Err() != nil {
			break
		}
		wait := a.retryAfter
		if wait <= 0 || wait > sdkMaxRetryAfter {
			wait = c.backoff(n)
		}
		if !c.clock.Sleep(ctx, wait) {
			break
		}
	}
	res.end = c.clock.Now()
	return res
}

// backoff is the SDKs' wait before retry n+1 with no usable Retry-After.
func (c *client) backoff(n int) time.Duration {
	d := min(float64(sdkBackoffFirst)*math.Pow(2, float64(n)), float64(sdkBackoffMax))
	c.mu.Lock()
	j := 1 - 0.25*c.rng.Float64()
	c.mu.Unlock()
	return time.Duration(d * j)
}

func (c *client) attempt(ctx context.Context, cl call, n int) (a attempt) {
	a.start = c.clock.Now()
	defer func() { a.end = c.clock.Now() }()
	actx, cancel := context.WithTimeout(ctx, c.clock.Wall(sdkTimeout))
	defer cancel()
	defer func() {
		if a.outcome != okAnswer && a.outcome != httpError && a.outcome != errorEvent {
			switch {
			case ctx.Err() != nil:
				a.outcome, a.retryable = cancelled, false
			case actx.Err() != nil:
				a.outcome, a.retryable = timedOut, true
			}
		}
	}()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, c.base+cl.kind.path(), bytes.NewReader(cl.body))
	if err != nil {
		a.outcome = reset
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Stainless-Retry-Count", strconv.Itoa(n))
	req.Header.Set("X-Stainless-Timeout", strconv.FormatFloat(sdkTimeout.Seconds(), 'f', -1, 64))
	resp, err := c.http.Do(req)
	if err != nil {
		a.outcome, a.retryable = reset, true
		return a
	}
	defer resp.Body.Close()
	a.status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var e struct {
			Error struct {
				Code any `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error.Code != nil {
			a.code = strings.Trim(string(mustJSON(e.Error.Code)), `"`)
		}
		a.outcome = httpError
		a.retryable = simclient.ShouldRetry(resp.StatusCode, resp.Header)
		if ra, ok := simclient.RetryAfter(resp.Header, time.Now()); ok {
			a.retryAfter = ra // the limiter keeps engine time: its seconds are the client's
		}
		return a
	}
	ans := simclient.ReadAnswer(resp)
	a.text, a.ids, a.dones = ans.Text, ans.IDs, ans.Dones
	switch {
	case ans.ErrorCode != "":
		a.code, a.outcome = ans.ErrorCode, errorEvent
	case ans.Err != nil:
		a.outcome = reset // the answer broke off before its end
	default:
		a.outcome = okAnswer
	}
	return a
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(errors.New("hanglost: " + err.Error()))
	}
	return b
}
