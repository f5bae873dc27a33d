package admission

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

// The properties of the engine client (newTransport) the limiter relies
// on: a client leaving is seen by the engine, a call without an
// idempotency key the engine may have read is never sent twice, and an
// idle connection is dropped before the engine's keep-alive drops it.

// ---- helpers ----

// countedEngine is an httptest engine that counts the connections it
// opened and closed, so tests can tell reuse from redial.
type countedEngine struct {
	*httptest.Server
	opened, closed atomic.Int32
}

func newCountedEngine(t *testing.T, h http.HandlerFunc, configure ...func(*http.Server)) *countedEngine {
	t.Helper()
	s := &countedEngine{Server: httptest.NewUnstartedServer(h)}
	for _, f := range configure {
		f(s.Config)
	}
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.closed.Add(1)
		}
	}
	s.Start()
	t.Cleanup(func() {
		// A failed test may leave a handler blocked on its connection:
		// closing them first keeps Close from hanging.
		s.CloseClientConnections()
		s.Close()
	})
	return s
}

// rawEngine is a loopback TCP engine for exact control of the wire: each
// accepted connection is handed to serve with its accept index (from 0).
type rawEngine struct {
	url     string
	accepts atomic.Int32
	mu      sync.Mutex
	conns   []net.Conn
	done    bool
	wg      sync.WaitGroup
}

func newRawEngine(t *testing.T, serve func(i int, c net.Conn, br *bufio.Reader)) *rawEngine {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawEngine{url: "http://" + ln.Addr().String()}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			i := int(s.accepts.Add(1)) - 1
			s.mu.Lock()
			if s.done {
				s.mu.Unlock()
				c.Close()
				return
			}
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Go(func() {
				defer c.Close()
				serve(i, c, bufio.NewReader(c))
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		s.done = true
		for _, c := range s.conns {
			c.Close() // unblocks serve functions still reading
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

// rawAnswer is a keep-alive HTTP/1.1 answer with a sized body.
func rawAnswer(body string) string {
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// rawLoop serves the requests of a raw connection in turn: reply gives
// the bytes to write for the n-th request (from 0) on connection i, and
// whether to close the connection after writing them.
func rawLoop(reply func(i, n int, req *http.Request, body []byte) (string, bool)) func(int, net.Conn, *bufio.Reader) {
	return func(i int, c net.Conn, br *bufio.Reader) {
		for n := 0; ; n++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return
			}
			out, closeAfter := reply(i, n, req, body)
			if _, err := io.WriteString(c, out); err != nil || closeAfter {
				return
			}
		}
	}
}

// engineClient is the limiter's engine client, its dials counted (the
// count is final when RoundTrip returns, unlike a server's accepts).
// wrap, when set, wraps the n-th connection dialed (from 1).
func engineClient(t *testing.T, wrap func(n int32, c net.Conn) net.Conn) (*http.Transport, *atomic.Int32) {
	tr := newTransport()
	dial := tr.DialContext
	var n atomic.Int32
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		i := n.Add(1)
		c, err := dial(ctx, network, addr)
		if err == nil && wrap != nil {
			c = wrap(i, c)
		}
		return c, err
	}
	// Registered after the engines, so it runs before their Close: they
	// need not wait for idle client connections.
	t.Cleanup(tr.CloseIdleConnections)
	return tr, &n
}

func newEngineRequest(t *testing.T, ctx context.Context, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// fetch makes a request, reads its answer to EOF and checks the status.
func fetch(t *testing.T, tr http.RoundTripper, method, url string, body io.Reader) string {
	t.Helper()
	resp, err := tr.RoundTrip(newEngineRequest(t, t.Context(), method, url, body))
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: status %d, want 200", method, url, resp.StatusCode)
	}
	return string(b)
}

// receive fails unless ch delivers within d.
func receive[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
		panic("unreachable")
	}
}

// trackedBody records whether the transport closed the request body; a
// ReadCloser of its own type, so NewRequest sets no GetBody for it.
type trackedBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *trackedBody) Close() error { b.closed.Store(true); return nil }

// endless is a request body that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// ---- tests ----

func TestTheEngineClientsSettings(t *testing.T) {
	tr := newTransport()
	if tr.Proxy != nil {
		t.Error("Proxy set: the engine is local and must never go through an environment proxy")
	}
	if tr.DialContext == nil {
		t.Error("no DialContext: connects would have no timeout")
	}
	if d := tr.IdleConnTimeout; d <= 0 || d >= 5*time.Second {
		t.Errorf("IdleConnTimeout %v, want in (0, 5s): below uvicorn's keep-alive", d)
	}
	if !tr.DisableCompression {
		t.Error("compression on: usage is read from identity answers as they pass")
	}
	if tr.MaxIdleConnsPerHost < 1024 || tr.MaxIdleConns < 1024 {
		t.Errorf("idle pool %d per host, %d in all; want >= 1024", tr.MaxIdleConnsPerHost, tr.MaxIdleConns)
	}
}

// TestCancelBeforeAnswer: the context ending while the request is being
// written or its answer awaited ends RoundTrip at once with the context's
// error, and closes the connection so the engine sees the client go.
func TestCancelBeforeAnswer(t *testing.T) {
	awaitCancel := func(r *http.Request) bool {
		select {
		case <-r.Context().Done():
			return true
		case <-time.After(2 * time.Second):
			return false
		}
	}
	cases := []struct {
		name string
		body io.Reader
		// wait blocks until the handler sees the client gone; false if it
		// never does.
		wait func(r *http.Request) bool
		// reused sends the request on a pooled connection: a cancelled
		// request must not be taken for a stale connection and retried.
		reused bool
	}{
		{"awaiting the header", nil, awaitCancel, false},
		{"awaiting the header on a reused connection", nil, awaitCancel, true},
		{"writing an endless body", endless{}, func(r *http.Request) bool {
			// The body can only end by the client closing mid-chunk.
			_, err := io.Copy(io.Discard, r.Body)
			return err != nil
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			arrived := make(chan struct{}, 1)
			gone := make(chan bool, 1)
			s := newCountedEngine(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/warm" {
					return
				}
				arrived <- struct{}{}
				gone <- c.wait(r)
			})
			tr, dials := engineClient(t, nil)
			if c.reused {
				fetch(t, tr, "GET", s.URL+"/warm", nil)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			req := newEngineRequest(t, ctx, "POST", s.URL+"/slow", c.body)
			if c.body != nil {
				req.ContentLength = -1
			}
			errc := make(chan error, 1)
			go func() {
				resp, err := tr.RoundTrip(req)
				if resp != nil {
					resp.Body.Close()
				}
				errc <- err
			}()
			receive(t, arrived, time.Second, "the request to arrive")
			cancel()
			err := receive(t, errc, time.Second, "RoundTrip to return after cancel")
			if !errors.Is(err, context.Canceled) {
				t.Errorf("RoundTrip error %v, want one wrapping context.Canceled", err)
			}
			if !receive(t, gone, time.Second, "the handler to end") {
				t.Error("the server did not see the client go")
			}
			// The cancelled connection is closed, not kept idle.
			testinfra.WaitFor(t, time.Second, "the cancelled connection closed", func() bool { return s.closed.Load() == 1 })
			if n := dials.Load(); n != 1 {
				t.Errorf("%d dials, want 1 (no retry after a cancel)", n)
			}
		})
	}
}

// TestCancelDeadline: a context deadline reached before the answer ends
// RoundTrip with an error wrapping context.DeadlineExceeded.
func TestCancelDeadline(t *testing.T) {
	s := newCountedEngine(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Second):
		}
	})
	tr, _ := engineClient(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := tr.RoundTrip(newEngineRequest(t, ctx, "GET", s.URL, nil))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("RoundTrip error %v, want one wrapping context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("RoundTrip took %v after a 50ms deadline", d)
	}
}

// TestEndingABlockedRead: a Read blocked in the middle of a streamed answer
// ends at once when the request's context ends or the body is closed from
// another goroutine; either way with an error, never EOF (the answer is
// cut, and a copy loop must not take it for whole), and the engine sees
// the client go.
func TestEndingABlockedRead(t *testing.T) {
	cases := []struct {
		name string
		end  func(cancel context.CancelFunc, body io.Closer)
	}{
		{"context cancelled", func(cancel context.CancelFunc, _ io.Closer) { cancel() }},
		{"body closed", func(_ context.CancelFunc, body io.Closer) { body.Close() }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gone := make(chan struct{}, 1)
			s := newCountedEngine(t, func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "first\n")
				http.NewResponseController(w).Flush()
				select {
				case <-r.Context().Done():
					gone <- struct{}{}
				case <-time.After(2 * time.Second):
				}
			})
			tr, _ := engineClient(t, nil)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			resp, err := tr.RoundTrip(newEngineRequest(t, ctx, "GET", s.URL+"/stream", nil))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.ContentLength != -1 || len(resp.TransferEncoding) == 0 {
				t.Fatalf("answer not streamed: ContentLength %d, TransferEncoding %v", resp.ContentLength, resp.TransferEncoding)
			}
			first := make([]byte, len("first\n"))
			if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first\n" {
				t.Fatalf("first chunk %q, %v", first, err)
			}
			readErr := make(chan error, 1)
			go func() {
				_, err := resp.Body.Read(make([]byte, 64)) // blocks: nothing more is sent
				readErr <- err
			}()
			time.Sleep(20 * time.Millisecond) // let the Read block
			c.end(cancel, resp.Body)
			err = receive(t, readErr, time.Second, "the blocked Read to end")
			if err == nil || err == io.EOF {
				t.Errorf("blocked Read returned %v, want an error (not EOF: the answer is cut)", err)
			}
			if _, err := resp.Body.Read(make([]byte, 64)); err == nil || err == io.EOF {
				t.Errorf("a later Read returned %v, want an error", err)
			}
			receive(t, gone, time.Second, "the server to see the client go")
			testinfra.WaitFor(t, time.Second, "the cut connection closed", func() bool { return s.closed.Load() == 1 })
		})
	}
}

// TestStaleIdleConnection: a pooled connection the engine closed while it
// was idle is dropped before use and the request goes on a new one. The
// request's body cannot be replayed, so a missed check would fail it
// instead of being hidden by a retry.
func TestStaleIdleConnection(t *testing.T) {
	cases := []struct {
		name string
		// start returns the engine's URL, a way to wait until it closed the
		// first connection, and its connection count.
		start func(t *testing.T) (url string, closed func() bool, conns func() int32)
	}{
		{"raw engine closes after one answer", func(t *testing.T) (string, func() bool, func() int32) {
			var closed atomic.Bool
			s := newRawEngine(t, func(i int, c net.Conn, br *bufio.Reader) {
				rawLoop(func(i, n int, req *http.Request, body []byte) (string, bool) {
					return rawAnswer("conn " + strconv.Itoa(i) + " " + string(body)), i == 0
				})(i, c, br)
				if i == 0 {
					c.Close()
					closed.Store(true)
				}
			})
			return s.url, closed.Load, s.accepts.Load
		}},
		{"httptest engine idle timeout", func(t *testing.T) (string, func() bool, func() int32) {
			s := newCountedEngine(t, func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				io.WriteString(w, "conn ? "+string(b))
			}, func(c *http.Server) { c.IdleTimeout = 30 * time.Millisecond })
			return s.URL, func() bool { return s.closed.Load() == 1 }, s.opened.Load
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			url, closed, conns := c.start(t)
			tr, _ := engineClient(t, nil)
			fetch(t, tr, "GET", url, nil)
			testinfra.WaitFor(t, time.Second, "the engine to close the idle connection", closed)
			time.Sleep(100 * time.Millisecond) // room for the FIN to reach the client

			body := &trackedBody{Reader: strings.NewReader("once")}
			req := newEngineRequest(t, t.Context(), "POST", url, body)
			req.ContentLength = 4
			if req.GetBody != nil {
				t.Fatal("GetBody set: the body would be replayable")
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("request after the engine closed the idle connection: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.HasSuffix(string(b), " once") {
				t.Errorf("answer %q", b)
			}
			if n := conns(); n != 2 {
				t.Errorf("%d connections, want 2", n)
			}
		})
	}
}

// TestRetryOnReusedConnection: a reused connection the engine closes after
// reading a request, without answering, gets the request sent again on a
// new connection only as net/http's rule allows: the request is idempotent
// (by method or an idempotency key) and its body can be replayed.
// Otherwise the error stands and the engine has seen the request once: a
// POST without a key is an LLM call that must not run twice.
func TestRetryOnReusedConnection(t *testing.T) {
	const payload = "the request body"
	withHeader := func(req *http.Request, k string) *http.Request { req.Header[k] = []string{"k-1"}; return req }
	cases := []struct {
		name  string
		req   func(t *testing.T, url string) *http.Request
		body  string // what the engine should see of request 2, each time
		retry bool
	}{
		{"POST without a key: sent once", func(t *testing.T, url string) *http.Request {
			return newEngineRequest(t, t.Context(), "POST", url, strings.NewReader(payload))
		}, payload, false},
		{"POST without a body or a key: sent once", func(t *testing.T, url string) *http.Request {
			return newEngineRequest(t, t.Context(), "POST", url, http.NoBody)
		}, "", false},
		{"POST with Idempotency-Key", func(t *testing.T, url string) *http.Request {
			return withHeader(newEngineRequest(t, t.Context(), "POST", url, strings.NewReader(payload)), "Idempotency-Key")
		}, payload, true},
		{"POST with X-Idempotency-Key, bytes body", func(t *testing.T, url string) *http.Request {
			return withHeader(newEngineRequest(t, t.Context(), "POST", url, bytes.NewReader([]byte(payload))), "X-Idempotency-Key")
		}, payload, true},
		{"GET", func(t *testing.T, url string) *http.Request {
			return newEngineRequest(t, t.Context(), "GET", url, nil)
		}, "", true},
		{"key but a body that cannot be replayed", func(t *testing.T, url string) *http.Request {
			req := newEngineRequest(t, t.Context(), "POST", url, &trackedBody{Reader: strings.NewReader(payload)})
			req.ContentLength = int64(len(payload))
			return withHeader(req, "Idempotency-Key")
		}, payload, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var bodies []string // request 2's bodies as the engine read them
			s := newRawEngine(t, rawLoop(func(i, n int, req *http.Request, body []byte) (string, bool) {
				if req.URL.Path != "/2" {
					return rawAnswer("one"), false
				}
				mu.Lock()
				bodies = append(bodies, string(body))
				mu.Unlock()
				if i == 0 {
					// Request 2 read whole on the reused connection: close
					// without a byte of answer.
					return "", true
				}
				return rawAnswer("two on " + strconv.Itoa(i)), false
			}))
			tr, dials := engineClient(t, nil)
			fetch(t, tr, "GET", s.url+"/1", nil)
			req := c.req(t, s.url+"/2")
			sent := req.Body
			resp, err := tr.RoundTrip(req)
			mu.Lock()
			got := bodies
			mu.Unlock()
			if !c.retry {
				if err == nil {
					resp.Body.Close()
					t.Fatal("RoundTrip succeeded, want an error (the request must not be sent again)")
				}
				if len(got) != 1 || got[0] != c.body {
					t.Errorf("engine read request 2 with bodies %q, want once %q", got, c.body)
				}
				if n := dials.Load(); n != 1 {
					t.Errorf("%d dials, want 1 (no retry)", n)
				}
				if tb, ok := sent.(*trackedBody); ok && !tb.closed.Load() {
					t.Error("request body not closed")
				}
				return
			}
			if err != nil {
				t.Fatalf("RoundTrip: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "two on 1" {
				t.Errorf("answer %q, want %q", b, "two on 1")
			}
			if len(got) != 2 || got[0] != c.body || got[1] != c.body {
				t.Errorf("engine read request 2 with bodies %q, want twice %q", got, c.body)
			}
			if n := dials.Load(); n != 2 {
				t.Errorf("%d dials, want 2", n)
			}
			if req.Body != sent {
				t.Error("the retry replaced the caller's request body (a RoundTripper must not modify the request)")
			}
		})
	}
}

// failingConn is a connection whose writes fail, without a byte sent,
// once fail is set: a reused connection found dead as the request is
// written.
type failingConn struct {
	net.Conn
	fail *atomic.Bool
}

func (c failingConn) Write(p []byte) (int, error) {
	if c.fail.Load() {
		return 0, syscall.EPIPE
	}
	return c.Conn.Write(p)
}

// TestRetryWhenNothingWasSent: a POST without a key that never reached
// the dead connection is sent on a new one: the engine cannot have seen
// it. It reaches the engine once.
func TestRetryWhenNothingWasSent(t *testing.T) {
	var mu sync.Mutex
	var posts int
	s := newRawEngine(t, rawLoop(func(i, n int, req *http.Request, body []byte) (string, bool) {
		if req.Method == "POST" {
			mu.Lock()
			posts++
			mu.Unlock()
		}
		return rawAnswer("conn " + strconv.Itoa(i)), false
	}))
	var fail atomic.Bool
	tr, dials := engineClient(t, func(n int32, c net.Conn) net.Conn {
		if n == 1 {
			return failingConn{c, &fail}
		}
		return c
	})
	fetch(t, tr, "GET", s.url, nil)
	fail.Store(true)
	if got := fetch(t, tr, "POST", s.url, strings.NewReader("the prompt")); got != "conn 1" {
		t.Errorf("answer %q, want it from the new connection", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if posts != 1 || dials.Load() != 2 {
		t.Errorf("engine read the POST %d times over %d dials, want once over 2", posts, dials.Load())
	}
}

// TestIdleTimeout: a connection idle longer than the idle timeout is
// closed and replaced, one idle less long is reused (the limiter's is
// below the engine's keep-alive; see TestTheEngineClientsSettings).
func TestIdleTimeout(t *testing.T) {
	cases := []struct {
		name  string
		pause time.Duration
		conns int32
	}{
		{"reused within", 0, 1},
		{"dropped after", 80 * time.Millisecond, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newCountedEngine(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
			tr, _ := engineClient(t, nil)
			tr.IdleConnTimeout = 50 * time.Millisecond
			fetch(t, tr, "GET", s.URL, nil)
			time.Sleep(c.pause)
			fetch(t, tr, "GET", s.URL, nil)
			if n := s.opened.Load(); n != c.conns {
				t.Errorf("%d connections, want %d", n, c.conns)
			}
			// The expired connection is closed, not leaked.
			testinfra.WaitFor(t, time.Second, "expired connections closed", func() bool { return s.closed.Load() == c.conns-1 })
		})
	}
}
