package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults for the zero Transport.
const (
	// DefaultIdleTimeout is below the keep-alive of uvicorn (vLLM's HTTP
	// server, 5 s by default), so an idle connection is dropped here
	// before the engine closes it under a request.
	DefaultIdleTimeout = 4 * time.Second
	// DefaultMaxIdle bounds the idle connections kept.
	DefaultMaxIdle = 1024
	// DefaultDialTimeout bounds a connect.
	DefaultDialTimeout = 5 * time.Second
)

// Transport is an http.RoundTripper for http:// URLs. The zero value is
// ready to use. Safe for concurrent use.
type Transport struct {
	// DialContext opens connections; nil uses a net.Dialer with
	// DefaultDialTimeout and TCP keep-alive.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxIdle is how many idle connections are kept (0: DefaultMaxIdle).
	MaxIdle int
	// IdleTimeout drops a connection idle for longer (0:
	// DefaultIdleTimeout).
	IdleTimeout time.Duration

	mu   sync.Mutex
	idle []*conn // most recently used last
}

// conn is one keep-alive connection to the engine.
type conn struct {
	nc     net.Conn
	addr   string
	br     *bufio.Reader
	bw     *bufio.Writer
	idleAt time.Time
	reused bool
	// sent counts the bytes of the current request that reached the
	// connection: none means the engine cannot have seen any of it.
	sent int64
}

// countingWriter is the connection under a conn's write buffer, counting
// what was handed to the kernel.
type countingWriter struct {
	c *conn
}

func (w countingWriter) Write(p []byte) (int, error) {
	n, err := w.c.nc.Write(p)
	w.c.sent += int64(n)
	return n, err
}

var (
	errScheme   = errors.New("upstream: only http:// URLs are supported")
	errNoAnswer = errors.New("upstream: connection closed before an answer")
)

// RoundTrip sends req on a pooled or new connection and returns the
// engine's answer. The answer's body must be read to EOF or closed; at EOF
// the connection goes back to the pool.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil || req.URL.Scheme != "http" {
		closeBody(req)
		return nil, errScheme
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	ctx := req.Context()
	c, err := t.get(ctx, addr, true)
	if err != nil {
		closeBody(req)
		return nil, fmt.Errorf("upstream: dial %s: %w", addr, err)
	}
	resp, err := t.roundTrip(c, req)
	if err == nil {
		return resp, nil
	}
	// A reused connection that fails before a byte of the answer is most
	// likely one the engine closed while it sat idle (its keep-alive ran
	// out as the request went). The request is sent again, once, on a new
	// connection, by net/http's rule: when none of it reached the
	// connection, or when it is idempotent or carries an idempotency key.
	// Otherwise the engine may have read it and be running it: an LLM call
	// sent twice costs twice, and a tool-calling agent may act twice.
	if errors.Is(err, errNoAnswer) && c.reused && ctx.Err() == nil && (c.sent == 0 || idempotent(req)) {
		if body, ok := rewind(req); ok {
			again := *req // the caller's request stays as it was
			again.Body = body
			if c, err = t.get(ctx, addr, false); err != nil {
				closeBody(&again)
				return nil, fmt.Errorf("upstream: dial %s: %w", addr, err)
			}
			if resp, err = t.roundTrip(c, &again); err == nil {
				return resp, nil
			}
		}
	}
	if cerr := ctx.Err(); cerr != nil {
		err = cerr
	}
	return nil, fmt.Errorf("upstream: %s %s: %w", req.Method, req.URL.Redacted(), err)
}

// roundTrip writes req on c and reads the answer's header. On error c is
// closed.
func (t *Transport) roundTrip(c *conn, req *http.Request) (*http.Response, error) {
	// The request's context ending closes the connection: a blocked write
	// or read returns at once, and the engine sees the client go.
	stop := context.AfterFunc(req.Context(), func() { c.nc.Close() })
	fail := func(err error) (*http.Response, error) {
		stop()
		c.nc.Close()
		return nil, err
	}
	c.sent = 0
	if err := req.Write(c.bw); err != nil {
		return fail(noAnswer(err))
	}
	if err := c.bw.Flush(); err != nil {
		return fail(noAnswer(err))
	}
	if _, err := c.br.Peek(1); err != nil {
		return fail(noAnswer(err))
	}
	var resp *http.Response
	for {
		var err error
		resp, err = http.ReadResponse(c.br, req)
		if err != nil {
			return fail(err)
		}
		// 1xx answers (100 Continue, 103 Early Hints) precede the real one.
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	// 101: the connection now speaks another protocol, never HTTP again.
	keep := !resp.Close && !req.Close && resp.ProtoAtLeast(1, 1) && resp.StatusCode != http.StatusSwitchingProtocols
	if resp.Body == http.NoBody {
		t.release(c, stop, keep)
		return resp, nil
	}
	resp.Body = &body{t: t, c: c, r: resp.Body, stop: stop, keep: keep}
	return resp, nil
}

// idempotent reports whether req may be sent twice: as net/http's
// Transport decides it, a GET, HEAD, OPTIONS or TRACE, or a request that
// carries an Idempotency-Key or X-Idempotency-Key header (even empty).
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	if _, ok := req.Header["Idempotency-Key"]; ok {
		return true
	}
	_, ok := req.Header["X-Idempotency-Key"]
	return ok
}

// noAnswer marks an error that came before any byte of the answer.
func noAnswer(err error) error { return fmt.Errorf("%w: %w", errNoAnswer, err) }

// rewind gives a fresh copy of req's body for a second send.
func rewind(req *http.Request) (io.ReadCloser, bool) {
	if req.Body == nil || req.Body == http.NoBody {
		return req.Body, true
	}
	if req.GetBody == nil {
		return nil, false
	}
	b, err := req.GetBody()
	return b, err == nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// get returns the most recently idled live connection to addr (when
// pooled is true), or dials.
func (t *Transport) get(ctx context.Context, addr string, pooled bool) (*conn, error) {
	now := time.Now()
	for pooled {
		t.mu.Lock()
		var c *conn
		for i := len(t.idle) - 1; i >= 0; i-- {
			if t.idle[i].addr == addr {
				c = t.idle[i]
				t.idle = append(t.idle[:i], t.idle[i+1:]...)
				break
			}
		}
		t.mu.Unlock()
		if c == nil {
			break
		}
		if now.Sub(c.idleAt) < t.idleTimeout() && c.alive() {
			c.reused = true
			return c, nil
		}
		c.nc.Close()
	}
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: DefaultDialTimeout, KeepAlive: 30 * time.Second}).DialContext
	}
	nc, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &conn{nc: nc, addr: addr, br: bufio.NewReaderSize(nc, 16<<10)}
	c.bw = bufio.NewWriterSize(countingWriter{c}, 16<<10)
	return c, nil
}

func (t *Transport) idleTimeout() time.Duration {
	if t.IdleTimeout > 0 {
		return t.IdleTimeout
	}
	return DefaultIdleTimeout
}

// release ends a request on c: back to the pool when the answer was read
// whole and the connection may be kept (and was not closed by a
// cancellation), else closed.
func (t *Transport) release(c *conn, stop func() bool, keep bool) {
	if !stop() || !keep || c.br.Buffered() > 0 {
		c.nc.Close()
		return
	}
	max := t.MaxIdle
	if max <= 0 {
		max = DefaultMaxIdle
	}
	c.idleAt = time.Now()
	t.mu.Lock()
	if len(t.idle) >= max {
		t.mu.Unlock()
		c.nc.Close()
		return
	}
	t.idle = append(t.idle, c)
	t.mu.Unlock()
}

// CloseIdleConnections closes every idle connection.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, c := range idle {
		c.nc.Close()
	}
}

// alive reports whether the engine has not closed c while it was idle: a
// non-blocking peek finds nothing to read (an idle keep-alive connection
// has nothing to say; EOF or an early byte both mean it cannot be used).
func (c *conn) alive() bool {
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var buf [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true // never wait: the answer is known
	})
	return err == nil && alive
}

// body is an answer's body: at EOF its connection goes back to the pool;
// closed early, the connection is closed (what is left unread would
// otherwise have to be drained, and the engine told to stop). Close may
// come from another goroutine during a Read: closing the connection ends
// the Read.
type body struct {
	t     *Transport
	c     *conn
	r     io.ReadCloser
	stop  func() bool
	keep  bool
	state atomic.Int32 // bodyOpen, bodyEOF or bodyClosed
}

const (
	bodyOpen int32 = iota
	bodyEOF
	bodyClosed
)

var errBodyClosed = errors.New("upstream: read on a closed answer body")

func (b *body) Read(p []byte) (int, error) {
	switch b.state.Load() {
	case bodyEOF:
		return 0, io.EOF
	case bodyClosed:
		// Not EOF: a copy loop must not take a cut-off answer for whole.
		return 0, errBodyClosed
	}
	n, err := b.r.Read(p)
	if err == io.EOF && b.state.CompareAndSwap(bodyOpen, bodyEOF) {
		b.t.release(b.c, b.stop, b.keep)
	}
	if err != nil && err != io.EOF && b.state.Load() == bodyClosed {
		err = errBodyClosed
	}
	return n, err
}

func (b *body) Close() error {
	if b.state.CompareAndSwap(bodyOpen, bodyClosed) {
		b.stop()
		b.c.nc.Close()
	}
	return nil
}
