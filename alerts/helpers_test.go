package alerts

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/slack-go/slack/slacktest"

	"github.com/vigil-dev/vigil/watchdog"
)

// Secrets the tests plant and then look for everywhere.
const (
	testToken  = "xoxb-111-222-SECRETTOKENabc"
	testAPIKey = "sk-engine-SECRETKEYdef"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

// sleeps records the waits the sender asks for and returns almost at
// once, so retries are exercised without really waiting.
type sleeps struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *sleeps) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	select {
	case <-time.After(time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *sleeps) All() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.waits...)
}

// logBuffer captures a logger's output, safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func testLogger() (*logrus.Entry, *logBuffer) {
	buf := &logBuffer{}
	l := logrus.New()
	l.SetOutput(buf)
	l.SetFormatter(&logrus.JSONFormatter{})
	l.SetLevel(logrus.DebugLevel)
	return logrus.NewEntry(l), buf
}

// fakeSlack is slack-go's slacktest server behind a front that records
// every request and can play Slack being unreachable, rate limiting, or
// refusing with an API error. It also plays an incoming webhook on
// /services/.
type fakeSlack struct {
	t     *testing.T
	st    *slacktest.Server
	front *httptest.Server

	mu         sync.Mutex
	reqs       []fakeReq
	down       bool   // drop the connection without an answer
	status     int    // answer this HTTP status instead (with Retry-After if set)
	limitN     int    // answer the next limitN requests with 429
	retryAfter string // Retry-After for 429s
	apiErr     string // answer {"ok":false,"error":apiErr}
}

// fakeReq is one request the front saw, and whether it was delivered.
type fakeReq struct {
	Path      string
	Form      url.Values
	Body      string
	Auth      string
	Delivered bool
}

func newFakeSlack(t *testing.T) *fakeSlack {
	t.Helper()
	f := &fakeSlack{t: t}
	// slacktest has no chat.update: answer it the way Slack does.
	f.st = slacktest.NewTestServer(func(c slacktest.Customize) {
		c.Handle("/chat.update", func(w http.ResponseWriter, r *http.Request) {
			_ = r.ParseForm()
			_ = json.NewEncoder(w).Encode(map[string]any{
				"ok": true, "channel": r.Form.Get("channel"), "ts": r.Form.Get("ts"), "text": r.Form.Get("text"),
			})
		})
	})
	f.st.Start()
	f.front = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		f.front.Close()
		f.st.Stop()
	})
	return f
}

func (f *fakeSlack) APIURL() string { return f.front.URL + "/api/" }

func (f *fakeSlack) WebhookURL() string {
	return f.front.URL + "/services/T0001/B0002/WEBHOOKSECRETxyz"
}

func (f *fakeSlack) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := fakeReq{Path: r.URL.Path, Body: string(body), Auth: r.Header.Get("Authorization")}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		req.Form, _ = url.ParseQuery(string(body))
	}
	f.mu.Lock()
	down, status, apiErr, ra := f.down, f.status, f.apiErr, f.retryAfter
	limited := f.limitN > 0
	if limited {
		f.limitN--
	}
	req.Delivered = !down && status == 0 && apiErr == "" && !limited
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()

	switch {
	case down:
		// Unreachable: the connection closes with no answer.
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
		w.WriteHeader(http.StatusBadGateway)
	case limited:
		w.Header().Set("Retry-After", ra)
		w.WriteHeader(http.StatusTooManyRequests)
	case status != 0:
		if ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		w.WriteHeader(status)
	case apiErr != "":
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": apiErr})
	case strings.HasPrefix(r.URL.Path, "/services/"):
		_, _ = io.WriteString(w, "ok")
	default:
		// Forward to slacktest, which answers as Slack would.
		path := strings.TrimPrefix(r.URL.Path, "/api")
		resp, err := http.Post(f.st.GetAPIURL()+strings.TrimPrefix(path, "/"), r.Header.Get("Content-Type"), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}
}

func (f *fakeSlack) set(fn func(f *fakeSlack)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeSlack) requests() []fakeReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeReq(nil), f.reqs...)
}

// delivered are the requests Slack accepted, in order.
func (f *fakeSlack) delivered() []fakeReq {
	var out []fakeReq
	for _, r := range f.requests() {
		if r.Delivered {
			out = append(out, r)
		}
	}
	return out
}

// posts are the delivered chat.postMessage calls.
func (f *fakeSlack) posts() []fakeReq {
	var out []fakeReq
	for _, r := range f.delivered() {
		if strings.HasSuffix(r.Path, "/chat.postMessage") {
			out = append(out, r)
		}
	}
	return out
}

// memNotifier records pages in memory; it can fail on demand.
type memNotifier struct {
	mu    sync.Mutex
	pages []Message
	fail  error
	retry bool
}

func (n *memNotifier) Notify(_ context.Context, m Message) (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fail != nil {
		return n.retry, n.fail
	}
	n.pages = append(n.pages, m)
	return false, nil
}

func (n *memNotifier) got() []Message {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Message(nil), n.pages...)
}

// runPager runs p's sender until the test ends.
func runPager(t *testing.T, p *Pager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// delivered runs p's sender, waits until every page queued is out, and
// returns the pages n got.
func delivered(t *testing.T, p *Pager, n *memNotifier) []Message {
	t.Helper()
	runPager(t, p)
	flush(t, p)
	return n.got()
}

// resolveNow tells p that inc resolved at now, on a healthy engine.
func resolveNow(p *Pager, inc *watchdog.Incident, now time.Time) {
	resolved := *inc
	resolved.Resolved = now
	p.Observe(healthy(now), &resolved)
}

// lastOfKind is the last of pages of kind (the zero Message if none).
func lastOfKind(pages []Message, kind Kind) Message {
	var last Message
	for _, m := range pages {
		if m.Kind == kind {
			last = m
		}
	}
	return last
}

func flush(t *testing.T, p *Pager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}
