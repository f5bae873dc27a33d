package simclient

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   time.Duration
		ok     bool
	}{
		{"retry-after-ms wins over Retry-After", map[string]string{"retry-after-ms": "1500", "Retry-After": "9"}, 1500 * time.Millisecond, true},
		{"fractional seconds are read", map[string]string{"Retry-After": "2.5"}, 2500 * time.Millisecond, true},
		{"an HTTP date is a wait from now", map[string]string{"Retry-After": now.Add(30 * time.Second).Format(http.TimeFormat)}, 30 * time.Second, true},
		{"garbage is no wait", map[string]string{"Retry-After": "soon"}, 0, false},
		{"no header is no wait", nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.header {
				h.Set(k, v)
			}
			got, ok := RetryAfter(h, now)
			if got != tc.want || ok != tc.ok {
				t.Errorf("RetryAfter = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestShouldRetry(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		header string
		want   bool
	}{
		{"429 is retried", 429, "", true},
		{"503 is retried", 503, "", true},
		{"408 and 409 are retried", 409, "", true},
		{"400 is not retried", 400, "", false},
		{"x-should-retry false stops a 503", 503, "false", false},
		{"x-should-retry true retries a 400", 400, "true", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.header != "" {
				h.Set("x-should-retry", tc.header)
			}
			if got := ShouldRetry(tc.status, h); got != tc.want {
				t.Errorf("ShouldRetry(%d, %q) = %v, want %v", tc.status, tc.header, got, tc.want)
			}
		})
	}
}

// script answers attempt n with answers[n] and records what each attempt
// carried.
type script struct {
	mu      sync.Mutex
	answers []func(w http.ResponseWriter, r *http.Request)
	seen    []http.Header
	at      []time.Time
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	n := len(s.seen)
	s.seen = append(s.seen, r.Header.Clone())
	s.at = append(s.at, time.Now())
	s.mu.Unlock()
	s.answers[min(n, len(s.answers)-1)](w, r)
}

func reject(status int, headers ...string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(status)
		fmt.Fprint(w, `{"error":{"message":"no","type":"server_error","param":null,"code":"x"}}`)
	}
}

func answer(w http.ResponseWriter, r *http.Request) {
	fmt.Fprint(w, `{"choices":[{"text":"hi"}]}`)
}

// hang never answers. It reads the body first: only then does the server
// watch the connection and cancel the request when the client hangs up.
func hang(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	<-r.Context().Done()
}

// fastPolicy is the paper's client on a clock 1000x faster than the wall:
// a 120 s timeout is 120 ms, a 60 s Retry-After 60 ms.
func fastCaller(url string) *Caller {
	c := NewCaller(url, "sk-test", NewClock(1000), RetryPolicy{MaxRetries: 3, Timeout: 120 * time.Second,
		BackoffMin: 250 * time.Millisecond, BackoffMax: 3 * time.Second, MaxRetryAfter: 60 * time.Second}, 1)
	return c
}

func TestCallerRetriesLikeTheSDK(t *testing.T) {
	for _, tc := range []struct {
		name         string
		answers      []func(http.ResponseWriter, *http.Request)
		headerScale  float64
		wantAttempts int
		wantOK       bool
		// minGap/maxGap bound the wall wait before the second attempt.
		minGap, maxGap time.Duration
	}{
		{name: "an answer on the first attempt is one attempt",
			answers: []func(http.ResponseWriter, *http.Request){answer}, wantAttempts: 1, wantOK: true},
		{name: "a 503 with retry-after-ms of 40 s waits 40 s, then retries",
			answers:     []func(http.ResponseWriter, *http.Request){reject(503, "retry-after-ms", "40000", "Retry-After", "40"), answer},
			headerScale: 1, wantAttempts: 2, wantOK: true, minGap: 38 * time.Millisecond, maxGap: 200 * time.Millisecond},
		{name: "a Retry-After over 60 s is ignored for the 0.25-3 s backoff",
			answers:     []func(http.ResponseWriter, *http.Request){reject(429, "Retry-After", "90"), answer},
			headerScale: 1, wantAttempts: 2, wantOK: true, maxGap: 30 * time.Millisecond},
		{name: "a wall-clock Retry-After is scaled to engine time before the 60 s rule",
			// 0.05 s of wall time is 50 s of engine time at scale 1000.
			answers:     []func(http.ResponseWriter, *http.Request){reject(503, "retry-after-ms", "50"), answer},
			headerScale: 1000, wantAttempts: 2, wantOK: true, minGap: 48 * time.Millisecond, maxGap: 200 * time.Millisecond},
		{name: "x-should-retry false ends the call",
			answers:      []func(http.ResponseWriter, *http.Request){reject(503, "x-should-retry", "false"), answer},
			wantAttempts: 1},
		{name: "a 400 is not retried",
			answers: []func(http.ResponseWriter, *http.Request){reject(400), answer}, wantAttempts: 1},
		{name: "an attempt that times out is retried",
			answers: []func(http.ResponseWriter, *http.Request){hang, answer}, wantAttempts: 2, wantOK: true},
		{name: "three retries then give up",
			answers: []func(http.ResponseWriter, *http.Request){reject(503)}, wantAttempts: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{answers: tc.answers}
			srv := httptest.NewServer(s)
			defer srv.Close()
			c := fastCaller(srv.URL)
			if tc.headerScale > 0 {
				c.HeaderScale = tc.headerScale
			}
			res := c.Do(context.Background(), Request{Body: []byte(`{}`), Key: "call-7"})
			if res.Attempts != tc.wantAttempts || res.Delivered != tc.wantOK {
				t.Fatalf("attempts %d delivered %v; want %d, %v (%+v)", res.Attempts, res.Delivered, tc.wantAttempts, tc.wantOK, res)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			for i, h := range s.seen {
				if got := h.Get("X-Stainless-Retry-Count"); got != strconv.Itoa(i) {
					t.Errorf("attempt %d: X-Stainless-Retry-Count %q", i, got)
				}
				if got := h.Get("Idempotency-Key"); got != "call-7" {
					t.Errorf("attempt %d: Idempotency-Key %q, want the call's key on every attempt", i, got)
				}
			}
			if tc.maxGap > 0 && len(s.at) >= 2 {
				gap := s.at[1].Sub(s.at[0])
				if gap < tc.minGap || gap > tc.maxGap {
					t.Errorf("waited %v before the retry, want %v..%v", gap, tc.minGap, tc.maxGap)
				}
			}
		})
	}
}

func TestCallerAnnouncesItsTimeoutInTheServersTime(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request){answer}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := fastCaller(srv.URL)
	c.HeaderScale = 1000 // a wall-clock server: 120 s of engine time is 0.12 s
	c.Do(context.Background(), Request{Body: []byte(`{}`)})
	if got := s.seen[0].Get("X-Stainless-Timeout"); got != "0.12" {
		t.Errorf("X-Stainless-Timeout %q, want 0.12", got)
	}
}

func TestCallerReadsAStreamToDone(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond) // 20 s of engine time before the first token
		for range 3 {
			fmt.Fprint(w, "data: {\"choices\":[{\"text\":\" a\"}]}\n\n")
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer srv.Close()
	c := fastCaller(srv.URL)
	res := c.Do(context.Background(), Request{Body: []byte(`{}`), Stream: true})
	if !res.Delivered || res.Tokens != 3 {
		t.Fatalf("delivered %v tokens %d, want a whole 3-token stream", res.Delivered, res.Tokens)
	}
	if res.TTFT < 20*time.Second || res.TTFT > 60*time.Second {
		t.Errorf("TTFT %v of engine time, want about 20 s", res.TTFT)
	}
}

func TestCallerCountsAStreamCutShortAsFailed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "data: {\"choices\":[{\"text\":\" a\"}]}\n\n")
	}))
	defer srv.Close()
	c := fastCaller(srv.URL)
	c.Policy.MaxRetries = 0
	if res := c.Do(context.Background(), Request{Body: []byte(`{}`), Stream: true}); res.Delivered {
		t.Fatalf("a stream without [DONE] counted as delivered: %+v", res)
	}
}

// The Node SDK with its timeout set on the client announces none.
func TestCallerCanOmitItsTimeoutLikeTheNodeSDK(t *testing.T) {
	s := &script{answers: []func(http.ResponseWriter, *http.Request){reject(503), answer}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c := fastCaller(srv.URL)
	c.OmitTimeoutHeader = true
	if res := c.Do(context.Background(), Request{Body: []byte(`{}`), Key: "k"}); !res.Delivered {
		t.Fatalf("not delivered: %+v", res)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, h := range s.seen {
		if v, ok := h["X-Stainless-Timeout"]; ok {
			t.Errorf("attempt %d sent X-Stainless-Timeout %v", i, v)
		}
		if got := h.Get("X-Stainless-Retry-Count"); got != strconv.Itoa(i) {
			t.Errorf("attempt %d: X-Stainless-Retry-Count %q", i, got)
		}
	}
}

// TimeoutUntilHeaders: a stream whose headers came in time is read past
// the timeout; one whose headers did not is a timeout.
func TestCallerTimeoutUntilHeaders(t *testing.T) {
	slowStream := func(headersAfter time.Duration) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-time.After(headersAfter):
			case <-r.Context().Done():
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			time.Sleep(60 * time.Millisecond) // past the 30 ms timeout
			fmt.Fprint(w, "data: {\"choices\":[{\"text\":\" a\"}]}\n\ndata: [DONE]\n\n")
		}
	}
	for _, tc := range []struct {
		name          string
		headersAfter  time.Duration
		untilHeaders  bool
		wantDelivered bool
	}{
		{"headers at once, timeout until headers: delivered", 0, true, true},
		{"headers at once, timeout to the last byte: cut", 0, false, false},
		{"headers late, timeout until headers: cut", 100 * time.Millisecond, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(slowStream(tc.headersAfter))
			defer srv.Close()
			c := fastCaller(srv.URL)
			c.Policy.Timeout = 30 * time.Second // 30 ms of wall time
			c.Policy.MaxRetries = 0
			c.Policy.TimeoutUntilHeaders = tc.untilHeaders
			res := c.Do(context.Background(), Request{Body: []byte(`{}`), Stream: true})
			if res.Delivered != tc.wantDelivered || (!tc.wantDelivered && res.Timeouts != 1) {
				t.Fatalf("delivered %v, %d timeouts; want delivered %v (else one timeout)", res.Delivered, res.Timeouts, tc.wantDelivered)
			}
		})
	}
}
