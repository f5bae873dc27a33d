package admission

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/admission/core"
)

// hopHeaders are connection-level headers a proxy must not forward
// (RFC 9110 section 7.6.1).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// serveHTTP routes a request: methods without a body (GET, HEAD, OPTIONS)
// pass through uncapped, so /v1/models, /health and /metrics always tell
// the truth about the engine; every other request is admission-controlled,
// whatever its path, so no endpoint bypasses the cap.
func (l *Limiter) serveHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		l.passThrough(w, r)
	default:
		l.admit(w, r)
	}
}

func (l *Limiter) passThrough(w http.ResponseWriter, r *http.Request) {
	l.c.passedThrough.Add(1)
	var body io.Reader = http.NoBody
	if r.ContentLength != 0 {
		body = http.MaxBytesReader(w, r.Body, l.cfg.MaxBodyBytes)
	}
	req := l.upstreamRequest(r.Context(), r, body, r.ContentLength)
	l.forward(w, r, req, nil)
}

func (l *Limiter) reject(w http.ResponseWriter, rj *rejection) {
	if c := l.c.rejected[rj.reason]; c != nil {
		c.Add(1)
	}
	l.log.WithFields(logrus.Fields{"reason": rj.reason, "status": rj.status,
		"retry_after_seconds": rj.wait.Seconds()}).Debug("admission: rejected")
	rj.write(w)
}

// admit is the admission-controlled path, in stages: read and validate
// the body, identify the call, find its work (a running execution or a
// stored answer), acquire a slot, then execute and stream.
func (l *Limiter) admit(w http.ResponseWriter, r *http.Request) {
	start := l.clock.Now() // the client's own timeout runs from about here
	body, info, ok := l.readBody(w, r)
	if !ok {
		return
	}
	promptTokens, tokens := estimateTokens(body, &info)
	c := l.identify(r, tenantKey(r), body, l.clock.Now())
	l.count(&c)
	a := &attempt{l: l, w: w, r: r, c: &c, start: start}
	if a.find() {
		return
	}
	tk, crj, err := l.core.Acquire(r.Context(), core.Request{Tenant: c.tenant, Tokens: tokens, Prompt: promptTokens,
		Retry: c.retry, NeverExecuted: c.neverExecuted, Timeout: c.timeout, Route: c.route, Stream: info.Stream,
		Keyed: c.keyed(), Coalesced: c.coalesce, Key: c.k, Bytes: int64(len(body))})
	switch {
	case err != nil:
		a.leftUnanswered(false) // the client left while queued; nobody to answer
		return
	case crj != nil:
		if c.adopt {
			l.co.markUnanswered(c.k, false, l.clock.Now())
		}
		l.reject(w, fromCore(crj))
		return
	}
	a.run(tk, body)
}

// readBody reads and checks the body of an admission-controlled request:
// within max_body_bytes, in time, and JSON on /v1/*. When it is not, the
// client has been answered and ok is false.
func (l *Limiter) readBody(w http.ResponseWriter, r *http.Request) (body []byte, info requestInfo, ok bool) {
	if r.ContentLength > l.cfg.MaxBodyBytes {
		// Refuse before reading a byte, and close: draining 100 MB to keep
		// the connection would be the slow path the limit exists to avoid.
		w.Header().Set("Connection", "close")
		l.reject(w, tooLarge(l.cfg.MaxBodyBytes))
		return nil, info, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, l.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &mbe):
			w.Header().Set("Connection", "close")
			l.reject(w, tooLarge(l.cfg.MaxBodyBytes))
		case errors.As(err, &ne) && ne.Timeout():
			w.Header().Set("Connection", "close")
			l.reject(w, &rejection{status: http.StatusRequestTimeout, reason: ReasonBadBody,
				typ: "invalid_request_error", message: "The request body was not received in time."})
		case r.Context().Err() == nil:
			l.reject(w, &rejection{status: http.StatusBadRequest, reason: ReasonBadBody,
				typ: "invalid_request_error", message: "The request body could not be read.", final: true})
		}
		return nil, info, false
	}
	// The body is in: from here the connection's read deadline would only
	// cut a long answer short (net/http cancels the request when its
	// background read times out), so lift it.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		if !json.Valid(body) {
			l.reject(w, &rejection{status: http.StatusBadRequest, reason: ReasonInvalidJSON, typ: "invalid_request_error",
				message: "The request body is not valid JSON.", final: true})
			return nil, info, false
		}
		_ = json.Unmarshal(body, &info) // a body of another shape still counts by its length
	}
	return body, info, true
}

// count counts an identified attempt, and feeds the route's inferred
// timeout: a keyed call's last attempt left unanswered and came back, so
// it timed out, and that wait was its timeout.
func (l *Limiter) count(c *identity) {
	l.c.calls.Add(1)
	if c.gaveUp > 0 && c.timeout == 0 {
		l.core.GaveUp(c.route, c.gaveUp)
	}
	if c.retry {
		l.c.retries.Add(1)
	}
	if c.findable() {
		l.c.keyedRetries.Add(1)
	}
}

func tooLarge(limit int64) *rejection {
	return &rejection{status: http.StatusRequestEntityTooLarge, reason: ReasonBodyTooLarge, typ: "invalid_request_error",
		message: "The request body exceeds the limit of " + formatBytes(limit) + ".", final: true}
}

// upstreamRequest builds the request to the engine: same method, path,
// query and headers minus hop-by-hop ones; the engine's key instead of the
// client's when injection is on.
func (l *Limiter) upstreamRequest(ctx context.Context, r *http.Request, body io.Reader, n int64) *http.Request {
	u := *l.upstream
	u.Path = strings.TrimSuffix(l.upstream.Path, "/") + r.URL.Path
	u.RawPath = ""
	u.RawQuery = r.URL.RawQuery
	req, _ := http.NewRequestWithContext(ctx, r.Method, u.String(), body)
	req.ContentLength = n
	if n == 0 {
		req.Body = http.NoBody
	}
	h := r.Header.Clone()
	removeHop(h)
	h.Del("Accept-Encoding") // identity, so usage can be read on the way
	if l.cfg.InjectAPIKey && l.engineKey != "" {
		h.Set("Authorization", "Bearer "+l.engineKey.Value())
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := h.Get("X-Forwarded-For"); prior != "" {
			ip = prior + ", " + ip
		}
		h.Set("X-Forwarded-For", ip)
	}
	req.Header = h
	req.Host = ""
	return req
}

func removeHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// streaming reports whether an answer must be flushed as it comes: SSE, or
// any body of unknown length. A sized body (a JSON answer) goes out in one
// write, as the engine would have sent it.
func streaming(h http.Header) bool {
	return isSSE(h) || h.Get("Content-Length") == ""
}

func isSSE(h http.Header) bool {
	return strings.HasPrefix(strings.ToLower(h.Get("Content-Type")), "text/event-stream")
}

// copyResponseHeader sets the client's headers from the engine's answer.
func copyResponseHeader(dst, src http.Header) {
	for k, v := range src {
		dst[k] = append(dst[k][:0:0], v...)
	}
	removeHop(dst)
	if isSSE(src) {
		// Tell any buffering proxy in front of us (nginx) to pass it on.
		dst.Set("X-Accel-Buffering", "no")
	}
}

// forward runs one upstream call in the client's own goroutine and streams
// the answer back, flushing every read of a stream: used for pass-through (tk nil) and
// for requests without an idempotency key, whose upstream call is cancelled
// the moment the client leaves (the request context ends, the transport
// closes the connection, the engine aborts). It reports whether the client
// left before the engine's answer began.
func (l *Limiter) forward(w http.ResponseWriter, r *http.Request, req *http.Request, tk *core.Listener) (gaveUp bool) {
	ctx, cancel := context.WithCancel(req.Context())
	defer cancel()
	req = req.WithContext(ctx)
	o := core.Outcome{CompletionTokens: -1, TotalTokens: -1}
	if tk != nil {
		defer func() { tk.Release(o) }()
	}
	m := meter{sent: l.clock.Now(), call: l.inflight.start(promptOf(tk))}
	defer l.inflight.done(m.call)
	resp, err := l.transport.RoundTrip(req)
	if err != nil {
		if r.Context().Err() != nil {
			o.Cancelled = true
			if tk != nil {
				l.c.cancelledImmediate.Add(1)
			}
			return true
		}
		o.Dropped = true
		l.upstreamFailed(w, err)
		return
	}
	defer resp.Body.Close()
	m.sse = isSSE(resp.Header)
	o.Dropped = resp.StatusCode >= 500
	copyResponseHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	stream := streaming(resp.Header)
	if stream {
		_ = rc.Flush()
	}
	sinkErr, readErr := l.pump(resp, &m, tk, func(p []byte) error {
		if _, err := w.Write(p); err != nil {
			return err
		}
		if stream {
			_ = rc.Flush()
		}
		return nil
	})
	if sinkErr != nil || (readErr != nil && r.Context().Err() != nil) {
		o.Cancelled = true
		if tk != nil {
			l.c.cancelledImmediate.Add(1)
		}
		return false
	}
	if readErr != nil {
		// The engine broke off mid-answer: make the client see a broken
		// answer, not a complete-looking short one.
		o.Dropped = true
		l.c.upstreamErrors.Add(1)
		panic(http.ErrAbortHandler)
	}
	o.Success = resp.StatusCode >= 200 && resp.StatusCode < 300
	o.Streamed = m.sse
	if tk != nil { // no ticket: the limiter is bypassed and reads no outcome
		o.CompletionTokens, o.TotalTokens = m.tokens(tk.Prompt())
	}
	return false
}

// promptOf is the ticket's estimated prompt tokens (0 without a ticket).
func promptOf(tk *core.Listener) int {
	if tk == nil {
		return 0
	}
	return tk.Prompt()
}

// upstreamFailed answers a request whose upstream call failed before any
// header came back.
func (l *Limiter) upstreamFailed(w http.ResponseWriter, err error) {
	l.c.upstreamErrors.Add(1)
	l.log.WithError(err).Debug("admission: upstream call failed")
	badGateway().write(w)
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// pump copies the engine's answer into sink chunk by chunk, metering each
// (bytes, tokens, first-byte time) and timing the first streamed byte for
// the automatic cap (tk may be nil for uncapped calls). It returns the
// sink's error (the reader went away) or the read error (the engine broke
// off); both are nil at a clean end.
func (l *Limiter) pump(resp *http.Response, m *meter, tk *core.Listener, sink func([]byte) error) (sinkErr, readErr error) {
	bufp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bufp)
	buf := *bufp
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			now := l.clock.Now()
			first := m.first.IsZero()
			m.chunk(buf[:n], now)
			if first && tk != nil && m.sse && resp.StatusCode < 300 {
				tk.FirstToken(now.Sub(m.sent))
			}
			if err := sink(buf[:n]); err != nil {
				return err, nil
			}
		}
		if rerr == io.EOF {
			return nil, nil
		}
		if rerr != nil {
			return nil, rerr
		}
	}
}
