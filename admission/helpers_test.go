package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-dev/vigil/admission/core"
	"github.com/vigil-dev/vigil/configs"
)

const engineKey = "engine-secret-key"

// Figures of the core the tests here count with.
const (
	autoInitial    = core.AutoInitial
	retryFloor     = core.RetryFloor
	serviceSamples = core.ServiceSamples
)

// testConfig is the default config with a fixed small cap and timeouts
// short enough for unit tests.
func testConfig() configs.Admission {
	c := configs.Default().Admission
	c.Listen = "127.0.0.1:0"
	c.MaxInFlight = 4
	c.MaxQueue = 8
	c.MaxQueueWait = 2 * time.Second
	c.CancelAfter = 300 * time.Millisecond
	c.ReadHeaderTimeout = 300 * time.Millisecond
	c.ReadTimeout = time.Second
	c.SlowStart = 0
	return c
}

// proxy is a limiter served on a real listener, so the server's timeouts
// apply as in production.
type proxy struct {
	l    *Limiter
	url  string
	stop func() // shuts the server down and closes the limiter (also at cleanup)
}

func startProxy(t testing.TB, cfg configs.Admission, upstream string, opts ...Option) proxy {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(cfg, u, engineKey, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	if pn := bubbleNet(t); pn != nil {
		ln = pn.listen()
		l.transport.DialContext = pn.dial
	} else if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Serve(ctx, ln) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
			l.Close()
		})
	}
	t.Cleanup(stop)
	return proxy{l: l, url: "http://" + ln.Addr().String(), stop: stop}
}

// fakeEngine is an httptest upstream that counts what it sees.
type fakeEngine struct {
	srv       *httptest.Server
	cur, peak atomic.Int64
	calls     atomic.Int64
	cancelled atomic.Int64 // requests whose context ended before the handler finished
	mu        sync.Mutex
	auth      []string
	handle    func(w http.ResponseWriter, r *http.Request)
}

func newFakeEngine(t testing.TB, handle func(w http.ResponseWriter, r *http.Request)) *fakeEngine {
	f := &fakeEngine{handle: handle}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		n := f.cur.Add(1)
		for {
			p := f.peak.Load()
			if n <= p || f.peak.CompareAndSwap(p, n) {
				break
			}
		}
		defer f.cur.Add(-1)
		f.mu.Lock()
		f.auth = append(f.auth, r.Header.Get("Authorization"))
		f.mu.Unlock()
		f.handle(w, r)
		if r.Context().Err() != nil {
			f.cancelled.Add(1)
		}
	}))
	if pn := bubbleNet(t); pn != nil {
		f.srv.Listener.Close()
		f.srv.Listener = pn.listen()
	}
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f
}

// okJSON answers like a completion with usage.
func okJSON(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"id":"cmpl-1","object":"text_completion","choices":[{"text":"hi"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
}

// blockUntil answers okJSON once release is closed, or gives up when the
// client leaves.
func blockUntil(release <-chan struct{}) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
			okJSON(w, r)
		case <-r.Context().Done():
		}
	}
}

func newClient(t testing.TB) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 512, DisableCompression: true}
	if pn := bubbleNet(t); pn != nil {
		tr.DialContext = pn.dial
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

const completionBody = `{"model":"m","prompt":"hello there","max_tokens":8}`

func post(ctx context.Context, c *http.Client, base, body string, hdr ...string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return c.Do(req)
}

// result of one call, read to the end.
type answer struct {
	status int
	header http.Header
	body   string
	err    error
}

func call(ctx context.Context, c *http.Client, base, body string, hdr ...string) answer {
	resp, err := post(ctx, c, base, body, hdr...)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b), err: err}
}

// checkRejection asserts what every limiter rejection carries.
func checkRejection(t testing.TB, a answer, status int, reason string, shouldRetry bool) {
	t.Helper()
	if a.err != nil {
		t.Fatalf("request failed: %v", a.err)
	}
	if a.status != status {
		t.Fatalf("status %d, want %d (body %s)", a.status, status, a.body)
	}
	ra, err := strconv.Atoi(a.header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 60 {
		t.Errorf("Retry-After %q, want whole seconds in [1, 60]", a.header.Get("Retry-After"))
	}
	ms, err := strconv.Atoi(a.header.Get("retry-after-ms"))
	if err != nil || ms < 1 || ms > 60000 {
		t.Errorf("retry-after-ms %q, want milliseconds in [1, 60000]", a.header.Get("retry-after-ms"))
	}
	if got := a.header.Get("x-should-retry"); got != strconv.FormatBool(shouldRetry) {
		t.Errorf("x-should-retry %q, want %v", got, shouldRetry)
	}
	var body map[string]map[string]any
	if err := json.Unmarshal([]byte(a.body), &body); err != nil {
		t.Fatalf("error body %q is not JSON: %v", a.body, err)
	}
	e, ok := body["error"]
	if !ok {
		t.Fatalf("error body %s has no \"error\" object", a.body)
	}
	for _, f := range []string{"message", "type", "param", "code"} {
		if _, ok := e[f]; !ok {
			t.Errorf("error body lacks %q: %s", f, a.body)
		}
	}
	if e["param"] != nil {
		t.Errorf("param = %v, want null", e["param"])
	}
	if e["code"] != reason {
		t.Errorf("code = %v, want %q", e["code"], reason)
	}
}

// eventually polls cond every 5 ms for up to d. In a bubble (inBubble)
// time stands still instead, as the limiter's clock did when tests drove
// it by hand: every goroutine runs until blocked, then cond must hold.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if bubbleNet(t) != nil {
		synctest.Wait()
		if !cond() {
			t.Fatalf("with every goroutine blocked: %s", what)
		}
		return
	}
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// goroutinesSettle waits for the goroutine count to fall back to base.
func goroutinesSettle(t testing.TB, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines remain, baseline %d:\n%s", n, base, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// inBubble runs f in a testing/synctest bubble, whose clock moves only
// when every goroutine in it is blocked, on an in-memory network: the
// engines, proxies and clients that f starts (newFakeEngine, startProxy,
// newClient) talk over net.Pipe connections, on which goroutines block
// durably (over a real socket the bubble's clock would never move).
func inBubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		bubbleNets.Store(t, &pipeNet{listeners: map[string]*pipeListener{}})
		t.Cleanup(func() { bubbleNets.Delete(t) })
		f(t)
	})
}

// advance lets d pass on the bubble's clock and returns once every
// goroutine it woke is blocked again: the timers that came due have run.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// bubbleNets maps the *testing.T of each bubble to its network.
var bubbleNets sync.Map

// bubbleNet is t's in-memory network; nil outside inBubble.
func bubbleNet(t testing.TB) *pipeNet {
	n, _ := bubbleNets.Load(t)
	pn, _ := n.(*pipeNet)
	return pn
}

// pipeNet is an in-memory network of listeners by address.
type pipeNet struct {
	mu        sync.Mutex
	listeners map[string]*pipeListener
}

var errRefused = errors.New("connection refused")

// listen opens a listener at a new loopback-looking address.
func (n *pipeNet) listen() *pipeListener {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := &pipeListener{addr: pipeAddr(fmt.Sprintf("127.0.0.1:%d", 10001+len(n.listeners))),
		conns: make(chan net.Conn), done: make(chan struct{})}
	n.listeners[string(l.addr)] = l
	return l
}

// dial is a DialContext connecting to the listener at addr.
func (n *pipeNet) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("dial %s: %w", addr, errRefused)
	}
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
	case <-ctx.Done():
	}
	client.Close()
	server.Close()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("dial %s: %w", addr, errRefused)
}

// pipeListener accepts the server ends of its network's pipes.
type pipeListener struct {
	addr  pipeAddr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return l.addr }

type pipeAddr string

func (pipeAddr) Network() string  { return "tcp" }
func (a pipeAddr) String() string { return string(a) }

// The paths whose streams vigil continues (package engineloss).
const (
	pathCompletions = "/v1/completions"
	pathChat        = "/v1/chat/completions"
)
