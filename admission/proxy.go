package admission

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"
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
	if rj.status == http.StatusServiceUnavailable && (l.holdsEngine() || l.core.Holding()) {
		// Refused while the engine was held: a call the hang cost.
		if c := l.c.heldRefused[rj.reason]; c != nil {
			c.Add(1)
		}
		l.out.Note(func(f *Fate) { f.Refused[rj.reason]++ })
	}
	l.log.WithFields(logrus.Fields{"reason": rj.reason, "status": rj.status,
		"retry_after_seconds": rj.wait.Seconds()}).Debug("admission: rejected")
	rj.Write(w)
}

// admit is the admission-controlled path, as its stages: read and
// validate the body, identify the call, find work it already has (a
// running execution or a stored answer), acquire a slot, then execute and
// stream.
func (l *Limiter) admit(w http.ResponseWriter, r *http.Request) {
	start := l.clock.Now() // the client's own timeout runs from about here
	body, info, ok := l.readBody(w, r)
	if !ok {
		return
	}
	c := l.identify(r, tenantKey(r), body, l.clock.Now())
	l.count(&c)
	a := &attempt{l: l, w: w, r: r, c: &c, start: start}
	if a.find() {
		return
	}
	tk, ok := a.acquire(body, &info)
	if !ok {
		return
	}
	a.run(tk, body)
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

// upstreamRequest builds the request to the engine: same method, path,
// query and headers minus hop-by-hop ones; the engine's key instead of the
// client's when injection is on.
func (l *Limiter) upstreamRequest(ctx context.Context, r *http.Request, body io.Reader, n int64) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, r.Method, l.engineURL(r.URL.Path, r.URL.RawQuery), body)
	req.ContentLength = n
	if n == 0 {
		req.Body = http.NoBody
	}
	req.Header = l.withEngineKey(forwardHeader(r))
	req.Host = ""
	return req
}

// engineURL is the engine's URL for a client's path and query.
func (l *Limiter) engineURL(path, rawQuery string) string {
	u := *l.upstream
	u.Path = strings.TrimSuffix(l.upstream.Path, "/") + path
	u.RawPath = ""
	u.RawQuery = rawQuery
	return u.String()
}

// forwardHeader is the client's header as it goes on: without hop-by-hop
// fields and Accept-Encoding (identity, so usage can be read on the
// way), with the client's address added to X-Forwarded-For.
func forwardHeader(r *http.Request) http.Header {
	h := r.Header.Clone()
	removeHop(h)
	h.Del("Accept-Encoding")
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := h.Get("X-Forwarded-For"); prior != "" {
			ip = prior + ", " + ip
		}
		h.Set("X-Forwarded-For", ip)
	}
	return h
}

// withEngineKey puts the engine's key in h in place of the client's, when
// injection is on.
func (l *Limiter) withEngineKey(h http.Header) http.Header {
	if l.cfg.InjectAPIKey && l.engineKey != "" {
		h.Set("Authorization", "Bearer "+l.engineKey.Value())
	}
	return h
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

func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
