package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

// ---- helpers ----

// server is an httptest server that counts the connections it opened and
// closed, so tests can tell reuse from redial.
type server struct {
	*httptest.Server
	opened, closed atomic.Int32
}

func newServer(t *testing.T, h http.HandlerFunc, configure ...func(*http.Server)) *server {
	t.Helper()
	s := &server{Server: httptest.NewUnstartedServer(h)}
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

// rawServer is a loopback TCP server for exact control of the wire: each
// accepted connection is handed to serve with its accept index (from 0).
type rawServer struct {
	ln      net.Listener
	url     string
	accepts atomic.Int32
	mu      sync.Mutex
	conns   []net.Conn
	done    bool
	wg      sync.WaitGroup
}

func newRawServer(t *testing.T, serve func(i int, c net.Conn, br *bufio.Reader)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln, url: "http://" + ln.Addr().String()}
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

// readRequest reads one request and its whole body, as an engine would.
func readRequest(br *bufio.Reader) (*http.Request, []byte, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, nil, err
	}
	b, err := io.ReadAll(req.Body)
	return req, b, err
}

// ok is a keep-alive HTTP/1.1 answer with a sized body.
func ok(body string) string {
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// loop serves the requests of a raw connection in turn: reply gives the
// bytes to write for the n-th request (from 0) on connection i, and whether
// to close the connection after writing them.
func loop(reply func(i, n int, req *http.Request, body []byte) (string, bool)) func(int, net.Conn, *bufio.Reader) {
	return func(i int, c net.Conn, br *bufio.Reader) {
		for n := 0; ; n++ {
			req, body, err := readRequest(br)
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

func newTransport(t *testing.T, tr *Transport) *Transport {
	t.Helper()
	if tr == nil {
		tr = &Transport{}
	}
	// Registered after the servers, so it runs before their Close: the
	// servers need not wait for idle client connections.
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// dialCounter makes a Transport that counts its dials: unlike a server's
// accepts, the count is final when RoundTrip returns.
func dialCounter(t *testing.T) (*Transport, *atomic.Int32) {
	var n atomic.Int32
	var d net.Dialer
	return newTransport(t, &Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		n.Add(1)
		return d.DialContext(ctx, network, addr)
	}}), &n
}

func newRequest(t *testing.T, ctx context.Context, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// fetch makes a request, reads its answer to EOF and checks the status.
func fetch(t *testing.T, tr *Transport, method, url string, body io.Reader) (*http.Response, string) {
	t.Helper()
	resp, err := tr.RoundTrip(newRequest(t, t.Context(), method, url, body))
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
	return resp, string(b)
}

func idleLen(tr *Transport) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.idle)
}

// eventually polls cond for up to a second: for effects that cross the
// loopback (a FIN arriving, a server noticing a close).

// within fails unless ch delivers within d.
func within[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
		panic("unreachable")
	}
}

// trackedBody records whether the transport closed the request body.
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

// seen is what the echo handler saw of a request.
type seen struct {
	Method, Path, Query, Case string
	Multi                     []string // a header sent twice
	Length                    int64
	TE                        []string
	Body                      string
}

// TestKeepAlive: sequential requests read to EOF share one connection, and
// requests and answers cross intact in both directions.
func TestKeepAlive(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("server reading body: %v", err)
		}
		status, _ := strconv.Atoi(r.Header.Get("X-Status"))
		w.Header().Set("X-Answer", "for "+r.Header.Get("X-Case"))
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(seen{
			Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Case: r.Header.Get("X-Case"),
			Multi: r.Header.Values("X-Multi"), Length: r.ContentLength, TE: r.TransferEncoding, Body: string(b),
		})
	})
	tr := newTransport(t, nil)
	big := strings.Repeat("0123456789abcdef", 8<<10) // 128 KiB: several chunks
	cases := []struct {
		name, method, target string
		body                 string
		unsized              bool // send the body with ContentLength -1
		status               int
	}{
		{name: "get with query", method: "GET", target: "/a/b?x=1&y=two%20words", status: 200},
		{name: "post sized", method: "POST", target: "/v1/completions", body: `{"prompt":"hi"}`, status: 201},
		{name: "put unsized", method: "PUT", target: "/up", body: big, unsized: true, status: 202},
		{name: "post big sized", method: "POST", target: "/big?q", body: big, status: 200},
		{name: "delete", method: "DELETE", target: "/d/1", status: 200},
	}
	for _, c := range cases {
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		req := newRequest(t, t.Context(), c.method, s.URL+c.target, body)
		wantLen := int64(len(c.body))
		var wantTE []string
		if c.unsized {
			req.Body = io.NopCloser(req.Body)
			req.ContentLength = -1
			req.GetBody = nil
			wantLen = -1
			wantTE = []string{"chunked"}
		}
		req.Header.Set("X-Case", c.name)
		req.Header.Set("X-Status", strconv.Itoa(c.status))
		req.Header.Add("X-Multi", "a")
		req.Header.Add("X-Multi", "b, c")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s: reading answer: %v", c.name, err)
		}
		// After EOF: Read keeps saying EOF and Close must not close the
		// connection, which is already back in the pool.
		if n, err := resp.Body.Read(make([]byte, 8)); n != 0 || err != io.EOF {
			t.Errorf("%s: Read after EOF = %d, %v; want 0, EOF", c.name, n, err)
		}
		if err := resp.Body.Close(); err != nil {
			t.Errorf("%s: Close: %v", c.name, err)
		}
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d", c.name, resp.StatusCode, c.status)
		}
		if got, want := resp.Header.Get("X-Answer"), "for "+c.name; got != want {
			t.Errorf("%s: X-Answer %q, want %q", c.name, got, want)
		}
		var got seen
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: answer %q: %v", c.name, b, err)
		}
		path, query, _ := strings.Cut(c.target, "?")
		want := seen{Method: c.method, Path: path, Query: query, Case: c.name, Multi: []string{"a", "b, c"},
			Length: wantLen, TE: wantTE, Body: c.body}
		if got.Body != want.Body {
			t.Errorf("%s: server saw a body of %d bytes, not the %d sent", c.name, len(got.Body), len(want.Body))
		}
		got.Body, want.Body = "", ""
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: server saw %+v, want %+v", c.name, got, want)
		}
	}
	if n := s.opened.Load(); n != 1 {
		t.Errorf("%d connections opened for %d sequential requests, want 1", n, len(cases))
	}
	if n := idleLen(tr); n != 1 {
		t.Errorf("%d idle connections, want 1", n)
	}
}

// TestLastUsedFirst: of two idle connections, the one idled last is reused.
func TestLastUsedFirst(t *testing.T) {
	var arrivals sync.WaitGroup
	arrivals.Add(2)
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/pair" {
			// Hold both until both arrived, so they use two connections.
			arrivals.Done()
			arrivals.Wait()
		}
		io.WriteString(w, r.RemoteAddr)
	})
	tr := newTransport(t, nil)
	resps := make([]*http.Response, 2)
	var wg sync.WaitGroup
	for i := range resps {
		wg.Go(func() {
			resp, err := tr.RoundTrip(newRequest(t, t.Context(), "GET", s.URL+"/pair", nil))
			if err != nil {
				t.Error(err)
				return
			}
			resps[i] = resp
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var addrs [2]string
	for i, resp := range resps { // resps[1] reaches EOF last
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = string(b)
	}
	for range 3 {
		if _, got := fetch(t, tr, "GET", s.URL+"/one", nil); got != addrs[1] {
			t.Fatalf("request came from %s, want the last idled connection %s (other: %s)", got, addrs[1], addrs[0])
		}
	}
	if n := s.opened.Load(); n != 2 {
		t.Errorf("%d connections opened, want 2", n)
	}
}

// TestBodyClosedEarly: an answer closed before EOF closes its connection
// (what is left would have to be drained) and the next request redials.
func TestBodyClosedEarly(t *testing.T) {
	cases := []struct {
		name string
		read int // bytes read before Close
		h    http.HandlerFunc
	}{
		{"sized unread", 0, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(1<<20))
			w.Write(make([]byte, 1<<20))
		}},
		{"sized half read", 100, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "200")
			w.Write(make([]byte, 200))
		}},
		{"chunked endless", 10, func(w http.ResponseWriter, r *http.Request) {
			// Streams until the client goes: Close must not wait for it.
			rc := http.NewResponseController(w)
			for r.Context().Err() == nil {
				if _, err := w.Write(make([]byte, 4096)); err != nil {
					return
				}
				rc.Flush()
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/next" {
					io.WriteString(w, "next")
					return
				}
				c.h(w, r)
			})
			tr := newTransport(t, nil)
			resp, err := tr.RoundTrip(newRequest(t, t.Context(), "GET", s.URL+"/first", nil))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(resp.Body, make([]byte, c.read)); err != nil {
				t.Fatal(err)
			}
			closed := make(chan error, 1)
			go func() { closed <- resp.Body.Close() }()
			within(t, closed, time.Second, "Body.Close")
			if n := idleLen(tr); n != 0 {
				t.Errorf("%d idle connections after an early Close, want 0", n)
			}
			testinfra.WaitFor(t, time.Second, "the server to see the connection closed", func() bool { return s.closed.Load() == 1 })
			if _, got := fetch(t, tr, "GET", s.URL+"/next", nil); got != "next" {
				t.Errorf("next answer %q", got)
			}
			if n := s.opened.Load(); n != 2 {
				t.Errorf("%d connections opened, want 2 (no reuse after an early Close)", n)
			}
		})
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
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/warm" {
					return
				}
				arrived <- struct{}{}
				gone <- c.wait(r)
			})
			tr, dials := dialCounter(t)
			if c.reused {
				fetch(t, tr, "GET", s.URL+"/warm", nil)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			req := newRequest(t, ctx, "POST", s.URL+"/slow", c.body)
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
			within(t, arrived, time.Second, "the request to arrive")
			cancel()
			err := within(t, errc, time.Second, "RoundTrip to return after cancel")
			if !errors.Is(err, context.Canceled) {
				t.Errorf("RoundTrip error %v, want one wrapping context.Canceled", err)
			}
			if !within(t, gone, time.Second, "the handler to end") {
				t.Error("the server did not see the client go")
			}
			if n := idleLen(tr); n != 0 {
				t.Errorf("%d idle connections after a cancelled request, want 0", n)
			}
			if n := dials.Load(); n != 1 {
				t.Errorf("%d dials, want 1 (no retry after a cancel)", n)
			}
		})
	}
}

// TestCancelDeadline: a context deadline reached before the answer ends
// RoundTrip with an error wrapping context.DeadlineExceeded.
func TestCancelDeadline(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Second):
		}
	})
	tr := newTransport(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := tr.RoundTrip(newRequest(t, ctx, "GET", s.URL, nil))
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
		// want is the error the Read must wrap; nil: any error but EOF.
		want error
	}{
		{"context cancelled", func(cancel context.CancelFunc, _ io.Closer) { cancel() }, nil},
		{"body closed", func(_ context.CancelFunc, body io.Closer) { body.Close() }, errBodyClosed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gone := make(chan struct{}, 1)
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "first\n")
				http.NewResponseController(w).Flush()
				select {
				case <-r.Context().Done():
					gone <- struct{}{}
				case <-time.After(2 * time.Second):
				}
			})
			tr := newTransport(t, nil)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			resp, err := tr.RoundTrip(newRequest(t, ctx, "GET", s.URL+"/stream", nil))
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
			err = within(t, readErr, time.Second, "the blocked Read to end")
			switch {
			case err == nil || err == io.EOF:
				t.Errorf("blocked Read returned %v, want an error (not EOF: the answer is cut)", err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Errorf("blocked Read returned %v, want %v", err, c.want)
			}
			if _, err := resp.Body.Read(make([]byte, 64)); err == nil || err == io.EOF {
				t.Errorf("a later Read returned %v, want an error", err)
			}
			within(t, gone, time.Second, "the server to see the client go")
			if n := idleLen(tr); n != 0 {
				t.Errorf("%d idle connections, want 0", n)
			}
		})
	}
}

// TestCancelAfterAnswerKeepsConnection: once an answer is read whole, the
// context's end must no longer close its connection, now in the pool.
func TestCancelAfterAnswerKeepsConnection(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/empty" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		io.WriteString(w, "body")
	})
	tr := newTransport(t, nil)
	for _, path := range []string{"/body", "/empty"} {
		ctx, cancel := context.WithCancel(t.Context())
		resp, err := tr.RoundTrip(newRequest(t, ctx, "GET", s.URL+path, nil))
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
	}
	time.Sleep(20 * time.Millisecond) // room for a stray AfterFunc to run
	if n := s.closed.Load(); n != 0 {
		t.Errorf("server saw %d connections closed after cancels that came too late", n)
	}
	fetch(t, tr, "GET", s.URL+"/body", nil)
	if n := s.opened.Load(); n != 1 {
		t.Errorf("%d connections opened, want 1", n)
	}
}

// TestAlive: the peek tells an idle connection the engine keeps from one it
// closed or spoke on (an idle keep-alive connection has nothing to say).
func TestAlive(t *testing.T) {
	cases := []struct {
		name   string
		server func(c net.Conn) // what the server does to its end
		client func(c net.Conn) // what the client does to its end
		want   bool
	}{
		{"idle", nil, nil, true},
		{"server closed", func(c net.Conn) { c.Close() }, nil, false},
		{"server sent a byte", func(c net.Conn) { c.Write([]byte("H")) }, nil, false},
		{"client closed", nil, func(c net.Conn) { c.Close() }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ends := make(chan net.Conn, 1)
			s := newRawServer(t, func(_ int, nc net.Conn, br *bufio.Reader) {
				ends <- nc
				br.ReadByte() // hold the connection until cleanup
			})
			nc, err := net.Dial("tcp", s.ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { nc.Close() })
			cn := &conn{nc: nc}
			srv := within(t, ends, time.Second, "accept")
			if c.server != nil {
				c.server(srv)
			}
			if c.client != nil {
				c.client(nc)
			}
			if c.want {
				time.Sleep(10 * time.Millisecond) // nothing should arrive
				if !cn.alive() {
					t.Error("alive() = false for a live idle connection")
				}
				return
			}
			testinfra.WaitFor(t, time.Second, "alive() to turn false", func() bool { return !cn.alive() })
		})
	}
	// A conn without a file descriptor cannot be checked: assumed alive.
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if !(&conn{nc: a}).alive() {
		t.Error("alive() = false for a net.Pipe conn")
	}
}

// TestStaleIdleConnection: a pooled connection the server closed while it
// was idle is dropped before use and the request goes on a new one. The
// request's body cannot be replayed, so a missed check would fail it
// instead of being hidden by the retry.
func TestStaleIdleConnection(t *testing.T) {
	cases := []struct {
		name string
		// start returns the server's URL, a way to wait until it closed the
		// first connection, and its connection count.
		start func(t *testing.T) (url string, closed func() bool, conns func() int32)
	}{
		{"raw server closes after one answer", func(t *testing.T) (string, func() bool, func() int32) {
			s := newRawServer(t, loop(func(i, n int, req *http.Request, body []byte) (string, bool) {
				return ok("conn " + strconv.Itoa(i) + " " + string(body)), i == 0
			}))
			return s.url, func() bool { return true }, s.accepts.Load
		}},
		{"httptest server idle timeout", func(t *testing.T) (string, func() bool, func() int32) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				io.WriteString(w, "conn ? "+string(b))
			}, func(c *http.Server) { c.IdleTimeout = 30 * time.Millisecond })
			return s.URL, func() bool { return s.closed.Load() == 1 }, s.opened.Load
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			url, closed, conns := c.start(t)
			tr := newTransport(t, nil)
			fetch(t, tr, "GET", url, nil)
			testinfra.WaitFor(t, time.Second, "the server to close the idle connection", closed)
			if n := idleLen(tr); n != 1 {
				t.Fatalf("%d idle connections after the first answer, want 1", n)
			}
			// Wait for the FIN to be visible, so the test checks the peek
			// and not a race with it.
			tr.mu.Lock()
			pooled := tr.idle[0]
			tr.mu.Unlock()
			testinfra.WaitFor(t, time.Second, "the FIN to arrive", func() bool { return !pooled.alive() })

			body := &trackedBody{Reader: strings.NewReader("once")}
			req := newRequest(t, t.Context(), "POST", url, body)
			req.ContentLength = 4
			if req.GetBody != nil {
				t.Fatal("GetBody set: the body would be replayable")
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("request after the server closed the idle connection: %v", err)
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
// new connection only as net/http would: the request is idempotent (by
// method or an idempotency key) and its body can be replayed. Otherwise
// the error stands and the engine has seen the request once: a POST
// without a key is an LLM call that must not run twice.
func TestRetryOnReusedConnection(t *testing.T) {
	const payload = "the request body"
	withHeader := func(req *http.Request, k string) *http.Request { req.Header[k] = []string{"k-1"}; return req }
	cases := []struct {
		name  string
		req   func(t *testing.T, url string) *http.Request
		body  string // what the server should see of request 2, each time
		retry bool
	}{
		{"POST without a key: sent once", func(t *testing.T, url string) *http.Request {
			return newRequest(t, t.Context(), "POST", url, strings.NewReader(payload))
		}, payload, false},
		{"POST without a body or a key: sent once", func(t *testing.T, url string) *http.Request {
			return newRequest(t, t.Context(), "POST", url, http.NoBody)
		}, "", false},
		{"POST with Idempotency-Key", func(t *testing.T, url string) *http.Request {
			return withHeader(newRequest(t, t.Context(), "POST", url, strings.NewReader(payload)), "Idempotency-Key")
		}, payload, true},
		{"POST with X-Idempotency-Key, bytes body", func(t *testing.T, url string) *http.Request {
			return withHeader(newRequest(t, t.Context(), "POST", url, bytes.NewReader([]byte(payload))), "X-Idempotency-Key")
		}, payload, true},
		{"GET", func(t *testing.T, url string) *http.Request {
			return newRequest(t, t.Context(), "GET", url, nil)
		}, "", true},
		{"key but a body that cannot be replayed", func(t *testing.T, url string) *http.Request {
			// A ReadCloser of its own type: NewRequest sets no GetBody.
			req := newRequest(t, t.Context(), "POST", url, &trackedBody{Reader: strings.NewReader(payload)})
			req.ContentLength = int64(len(payload))
			return withHeader(req, "Idempotency-Key")
		}, payload, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var bodies []string // request 2's bodies as the server read them
			s := newRawServer(t, loop(func(i, n int, req *http.Request, body []byte) (string, bool) {
				if req.URL.Path != "/2" {
					return ok("one"), false
				}
				mu.Lock()
				bodies = append(bodies, string(body))
				mu.Unlock()
				if i == 0 {
					// Request 2 read whole on the reused connection: close
					// without a byte of answer.
					return "", true
				}
				return ok("two on " + strconv.Itoa(i)), false
			}))
			tr, dials := dialCounter(t)
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
				if !errors.Is(err, errNoAnswer) {
					t.Errorf("error %v, want one wrapping errNoAnswer", err)
				}
				if len(got) != 1 || got[0] != c.body {
					t.Errorf("server read request 2 with bodies %q, want once %q", got, c.body)
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
				t.Errorf("server read request 2 with bodies %q, want twice %q", got, c.body)
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
// the dead connection is sent on a new one, as net/http does: the engine
// cannot have seen it. It reaches the engine once.
func TestRetryWhenNothingWasSent(t *testing.T) {
	var mu sync.Mutex
	var posts int
	s := newRawServer(t, loop(func(i, n int, req *http.Request, body []byte) (string, bool) {
		if req.Method == "POST" {
			mu.Lock()
			posts++
			mu.Unlock()
		}
		return ok("conn " + strconv.Itoa(i)), false
	}))
	var fail atomic.Bool
	var dials atomic.Int32
	var d net.Dialer
	tr := newTransport(t, &Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if dials.Add(1) == 1 {
			return failingConn{nc, &fail}, nil
		}
		return nc, nil
	}})
	fetch(t, tr, "GET", s.url, nil)
	fail.Store(true)
	_, got := fetch(t, tr, "POST", s.url, strings.NewReader("the prompt"))
	if got != "conn 1" {
		t.Errorf("answer %q, want it from the new connection", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if posts != 1 || dials.Load() != 2 {
		t.Errorf("engine read the POST %d times over %d dials, want once over 2", posts, dials.Load())
	}
}

// TestNoRetryOnNewConnection: a new connection failing before the answer
// is not retried (the engine, not a stale pool, is at fault).
func TestNoRetryOnNewConnection(t *testing.T) {
	s := newRawServer(t, loop(func(i, n int, req *http.Request, body []byte) (string, bool) {
		return "", true // read the request, close without answering
	}))
	tr, dials := dialCounter(t)
	_, err := tr.RoundTrip(newRequest(t, t.Context(), "GET", s.url, nil))
	if !errors.Is(err, errNoAnswer) {
		t.Errorf("error %v, want one wrapping errNoAnswer", err)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("%d dials, want 1", n)
	}
}

// TestRetryUsesFreshConnection: the retry is documented to go on a fresh
// connection. With two pooled connections that both die on their next
// request, the retry must not take the second pooled one.
func TestRetryUsesFreshConnection(t *testing.T) {
	var first sync.WaitGroup
	first.Add(2)
	s := newRawServer(t, loop(func(i, n int, req *http.Request, body []byte) (string, bool) {
		if i >= 2 {
			return ok("fresh"), false
		}
		if n == 0 {
			// Hold both first requests so they take two connections.
			first.Done()
			first.Wait()
			return ok("first"), false
		}
		return "", true // the second request on a pooled connection dies
	}))
	tr := newTransport(t, nil)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			resp, err := tr.RoundTrip(newRequest(t, t.Context(), "GET", s.url, nil))
			if err != nil {
				t.Error(err)
				return
			}
			io.ReadAll(resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	if n := idleLen(tr); n != 2 {
		t.Fatalf("%d idle connections, want 2", n)
	}
	if _, got := fetch(t, tr, "GET", s.url, nil); got != "fresh" {
		t.Errorf("answer %q, want %q", got, "fresh")
	}
}

// TestIdleTimeout: a connection idle longer than IdleTimeout is closed and
// replaced, one idle less long is reused.
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
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
			tr := newTransport(t, &Transport{IdleTimeout: 50 * time.Millisecond})
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

// TestNoBodyAnswersReleaseAtOnce: an answer that cannot have a body gives
// its connection back on return, before the caller touches the body.
func TestNoBodyAnswersReleaseAtOnce(t *testing.T) {
	cases := []struct {
		name, method string
		status       int
	}{
		{"HEAD", "HEAD", http.StatusOK},
		{"204", "GET", http.StatusNoContent},
		{"304", "GET", http.StatusNotModified},
		{"empty 200", "GET", http.StatusOK},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/next" {
					io.WriteString(w, "next")
					return
				}
				if r.Method == "HEAD" {
					w.Header().Set("Content-Length", "1000") // size of the GET answer
				} else if c.status == http.StatusOK {
					w.Header().Set("Content-Length", "0")
				}
				w.WriteHeader(c.status)
			})
			tr := newTransport(t, nil)
			resp, err := tr.RoundTrip(newRequest(t, t.Context(), c.method, s.URL, nil))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Errorf("status %d, want %d", resp.StatusCode, c.status)
			}
			if n := idleLen(tr); n != 1 {
				t.Errorf("%d idle connections before the body is touched, want 1", n)
			}
			if _, got := fetch(t, tr, "GET", s.URL+"/next", nil); got != "next" {
				t.Errorf("next answer %q", got)
			}
			if n := s.opened.Load(); n != 1 {
				t.Errorf("%d connections, want 1", n)
			}
		})
	}
}

// TestNoReuse: answers after which the connection cannot carry another
// request are not pooled.
func TestNoReuse(t *testing.T) {
	cases := []struct {
		name  string
		reply string // raw answer to the first request; the server keeps serving unless it has to close
		close bool   // the server closes after it (the body ends there)
		req   func(*http.Request)
	}{
		{"answer Connection: close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi", false, nil},
		{"HTTP/1.0 answer", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", false, nil},
		{"HTTP/1.0 keep-alive answer", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi", false, nil},
		// Bytes past the answer (here, one nobody asked for) make the
		// connection's state unknowable.
		{"bytes after the answer", ok("hi") + ok("stale"), false, nil},
		{"body ended by close", "HTTP/1.1 200 OK\r\n\r\nhi", true, nil},
		{"request Close", ok("hi"), false, func(r *http.Request) { r.Close = true }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newRawServer(t, loop(func(i, n int, req *http.Request, body []byte) (string, bool) {
				if n == 0 && i == 0 {
					return c.reply, c.close
				}
				return ok("next"), false
			}))
			tr := newTransport(t, nil)
			req := newRequest(t, t.Context(), "GET", s.url, nil)
			if c.req != nil {
				c.req(req)
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(b) != "hi" {
				t.Fatalf("body %q, %v", b, err)
			}
			if n := idleLen(tr); n != 0 {
				t.Errorf("%d idle connections, want 0", n)
			}
			if _, got := fetch(t, tr, "GET", s.url, nil); got != "next" {
				t.Errorf("next answer %q", got)
			}
			if n := s.accepts.Load(); n != 2 {
				t.Errorf("%d connections, want 2", n)
			}
		})
	}
}

// TestInformationalAnswers: 1xx answers before the real one are skipped.
func TestInformationalAnswers(t *testing.T) {
	cases := []struct{ name, pre string }{
		{"100 Continue", "HTTP/1.1 100 Continue\r\n\r\n"},
		{"103 Early Hints", "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"},
		{"two", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newRawServer(t, loop(func(i, n int, req *http.Request, body []byte) (string, bool) {
				return c.pre + "HTTP/1.1 200 OK\r\nX-Final: yes\r\nContent-Length: 5\r\n\r\nfinal", false
			}))
			tr := newTransport(t, nil)
			for range 2 {
				resp, got := fetch(t, tr, "POST", s.url, strings.NewReader("body"))
				if got != "final" || resp.Header.Get("X-Final") != "yes" {
					t.Errorf("answer %q, header %v; want the 200's", got, resp.Header)
				}
				if resp.Header.Get("Link") != "" {
					t.Errorf("1xx header leaked into the answer: %v", resp.Header)
				}
			}
			if n := s.accepts.Load(); n != 1 {
				t.Errorf("%d connections, want 1", n)
			}
		})
	}
}

// TestSwitchingProtocolsNotPooled: a 101 answer hands the connection to
// another protocol; it must never carry an HTTP request again.
func TestSwitchingProtocolsNotPooled(t *testing.T) {
	s := newRawServer(t, loop(func(i, n int, req *http.Request, body []byte) (string, bool) {
		if i == 0 {
			// After the switch the peer speaks another protocol and,
			// here, waits for the client: it never answers HTTP again.
			return "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x-test\r\n\r\n", false
		}
		return ok("http"), false
	}))
	tr := newTransport(t, nil)
	req := newRequest(t, t.Context(), "GET", s.url, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "x-test")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	if n := idleLen(tr); n != 0 {
		t.Errorf("%d idle connections after a 101, want 0", n)
	}
}

// TestErrors: requests that cannot be sent fail with a telling error and
// still have their body closed.
func TestErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close() // nothing listens there now
	var dialed atomic.Value
	failDial := func(_ context.Context, _, addr string) (net.Conn, error) {
		dialed.Store(addr)
		return nil, errors.New("no dialing in this test")
	}
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	cases := []struct {
		name    string
		tr      *Transport
		ctx     context.Context
		url     string
		wantIs  error
		wantMsg string
		dialed  string // the address DialContext must have been given
	}{
		{"https", &Transport{}, t.Context(), "https://127.0.0.1:1/x", errScheme, "", ""},
		{"other scheme", &Transport{}, t.Context(), "ftp://127.0.0.1:1/x", errScheme, "", ""},
		{"refused", &Transport{}, t.Context(), "http://" + refused + "/x", nil, refused, ""},
		{"default port", &Transport{DialContext: failDial}, t.Context(), "http://127.0.0.1/x", nil, "127.0.0.1:80", "127.0.0.1:80"},
		{"cancelled before dial", &Transport{}, cancelled, "http://" + refused + "/x", context.Canceled, refused, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := &trackedBody{Reader: strings.NewReader("body")}
			req := newRequest(t, c.ctx, "POST", c.url, body)
			resp, err := c.tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
				t.Fatal("RoundTrip succeeded")
			}
			if c.wantIs != nil && !errors.Is(err, c.wantIs) {
				t.Errorf("error %v, want one wrapping %v", err, c.wantIs)
			}
			if !strings.Contains(err.Error(), c.wantMsg) {
				t.Errorf("error %q does not name %q", err, c.wantMsg)
			}
			if c.dialed != "" {
				if got, _ := dialed.Load().(string); got != c.dialed {
					t.Errorf("dialed %q, want %q", got, c.dialed)
				}
			}
			if !body.closed.Load() {
				t.Error("request body not closed")
			}
		})
	}
}

// TestMaxIdle: finished connections beyond MaxIdle are closed, and
// CloseIdleConnections closes the rest.
func TestMaxIdle(t *testing.T) {
	const n = 5
	var arrivals sync.WaitGroup
	arrivals.Add(n)
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		// Hold every request until all arrived: n connections at once.
		arrivals.Done()
		arrivals.Wait()
		io.WriteString(w, "ok")
	})
	tr := newTransport(t, &Transport{MaxIdle: 2})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, err := tr.RoundTrip(newRequest(t, t.Context(), "GET", s.URL, nil))
			if err != nil {
				t.Error(err)
				return
			}
			if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "ok" {
				t.Errorf("answer %q, %v", b, err)
			}
			resp.Body.Close()
		})
	}
	wg.Wait()
	if got := s.opened.Load(); got != n {
		t.Fatalf("%d connections opened, want %d", got, n)
	}
	if got := idleLen(tr); got != 2 {
		t.Errorf("%d idle connections, want MaxIdle 2", got)
	}
	testinfra.WaitFor(t, time.Second, "the connections beyond MaxIdle to close", func() bool { return s.closed.Load() == n-2 })
	tr.CloseIdleConnections()
	if got := idleLen(tr); got != 0 {
		t.Errorf("%d idle connections after CloseIdleConnections, want 0", got)
	}
	testinfra.WaitFor(t, time.Second, "every connection to close", func() bool { return s.closed.Load() == n })
}

// TestConcurrent: many goroutines share one Transport; every answer goes
// to its own request (run with -race).
func TestConcurrent(t *testing.T) {
	const goroutines, requests = 32, 25
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Echo", r.URL.Query().Get("id"))
		fmt.Fprintf(w, "%s|%s", r.URL.Query().Get("id"), b)
	})
	tr := newTransport(t, nil)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range requests {
				id := fmt.Sprintf("%d-%d", g, i)
				var body io.Reader
				if i%2 == 1 {
					body = strings.NewReader("body " + id)
				}
				resp, err := tr.RoundTrip(newRequest(t, t.Context(), "POST", s.URL+"/echo?id="+id, body))
				if err != nil {
					t.Errorf("%s: %v", id, err)
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := id + "|"
				if body != nil {
					want += "body " + id
				}
				if err != nil || string(b) != want || resp.Header.Get("X-Echo") != id {
					t.Errorf("%s: answer %q (X-Echo %q), %v; want %q", id, b, resp.Header.Get("X-Echo"), err, want)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := s.opened.Load(); n > goroutines {
		t.Errorf("%d connections for %d goroutines", n, goroutines)
	}
	if n := idleLen(tr); n != int(s.opened.Load()) {
		t.Errorf("%d idle connections, want all %d", n, s.opened.Load())
	}
}
