package admission

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/admission/calls"
	"github.com/vigil-dev/vigil/admission/core"
	"github.com/vigil-dev/vigil/admission/engineloss"
	"github.com/vigil-dev/vigil/admission/inflight"
	"github.com/vigil-dev/vigil/admission/usage"
)

// The last stage: calling the engine and streaming its answer back
// unbuffered, to one client (forward) or to every listener of an
// execution (execute, listen).

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
	// Not cut when the engine is lost: without an execution that outlives
	// it, the call has nowhere to move (admission.coalesce off).
	m := meter{Meter: usage.Meter{Sent: l.clock.Now()}, call: l.inflight.Start(promptOf(tk), nil)}
	l.stallSent(m.call, tk)
	answered := false
	defer func() { l.engineCallDone(m.call, answered, o.CompletionTokens) }()
	resp, err := l.transport.RoundTrip(req)
	if err != nil {
		if r.Context().Err() != nil {
			l.cancelled(&o, tk)
			return true
		}
		o.Dropped = true
		l.upstreamFailed(w, err)
		return
	}
	defer resp.Body.Close()
	m.SSE = isSSE(resp.Header)
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
		l.cancelled(&o, tk)
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
	o.Streamed = m.SSE
	if tk != nil { // no ticket: the limiter is bypassed and reads no outcome
		o.CompletionTokens, o.TotalTokens = m.Tokens(tk.Prompt())
	}
	answered = true
	return false
}

// cancelled marks a forwarded call cancelled because its client left
// (counted only for capped calls, tk non-nil).
func (l *Limiter) cancelled(o *core.Outcome, tk *core.Listener) {
	o.Cancelled = true
	if tk != nil {
		l.c.cancelledImmediate.Add(1)
	}
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
	badGateway().Write(w)
}

// meter meters one upstream answer (usage.Meter) and tells the stall
// watch of its reads: call is the engine call it belongs to (nil: a peer's
// answer).
type meter struct {
	usage.Meter
	call *inflight.Call
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
			first := m.First().IsZero()
			m.Chunk(buf[:n], now)
			if m.call != nil {
				l.sus.Chunk(m.call, now)
				l.inflight.Read()
			}
			if first && tk != nil && m.SSE && resp.StatusCode < 300 {
				tk.FirstToken(now.Sub(m.Sent))
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

// listen sends an execution's answer to one client from its first byte:
// a listener that attaches late gets the stream replayed from its start,
// then live. It returns when the answer ends or the client leaves, and
// reports whether the client left before the answer began.
func (l *Limiter) listen(w http.ResponseWriter, r *http.Request, ex *calls.Execution, cur *calls.Cursor) (gaveUp bool) {
	wrote, stream := false, false
	defer func() { l.co.Leave(ex, cur, wrote) }()
	rc := http.NewResponseController(w)
	for {
		p := ex.Next(cur)
		if !wrote && p.Started {
			copyResponseHeader(w.Header(), p.Header)
			w.WriteHeader(p.Status)
			wrote = true
			stream = streaming(p.Header)
			if stream {
				_ = rc.Flush()
			}
		}
		if len(p.Chunk) > 0 {
			if _, err := w.Write(p.Chunk); err != nil {
				return
			}
			if stream {
				_ = rc.Flush()
			}
		}
		if p.Done {
			switch {
			case !wrote && p.Failure != nil:
				p.Failure.Write(w)
			case !wrote:
				badGateway().Write(w)
			case !p.Complete:
				panic(http.ErrAbortHandler) // a broken answer must look broken
			}
			return
		}
		select {
		case <-p.Changed:
		case <-r.Context().Done():
			return !wrote
		}
	}
}

// execute runs a call upstream and tees its answer into the execution's
// buffer. When the engine is lost under it (SetRecovering), it moves
// instead of failing: sent again to a peer or to the restarted engine,
// its stream continued where it stopped (relay.go).
func (l *Limiter) execute(ex *calls.Execution, rl *relay, tk *core.Listener) {
	o := core.Outcome{CompletionTokens: -1, TotalTokens: -1}
	complete := false
	var failure *rejection
	defer func() {
		if p := recover(); p != nil {
			l.log.WithField("panic", fmt.Sprint(p)).Error("admission: upstream execution panicked")
			o.Dropped = true
			failure = badGateway()
		}
		if !complete && ex.Context().Err() != nil {
			o.Cancelled = true
		}
		tk.Release(o)
		var f calls.Failure
		if failure != nil { // not a nil *rejection in a non-nil Failure
			f = failure
		}
		l.co.Finish(ex, complete, f, l.clock.Now())
	}()
	d, body, cont := dest{}, rl.Body, false
	for {
		var res sendResult
		res, complete, failure = l.send(ex, rl, d, body, cont, tk, &o)
		if res == sentDone {
			return
		}
		if res == sentRefused {
			rl.Moves-- // a peer that would not take it moved nothing
		}
		mv := l.mover().MoveTo(ex, rl)
		switch mv.Kind {
		case engineloss.MoveStop:
			return
		case engineloss.MoveEnd:
			l.co.Append(ex, []byte("data: [DONE]\n\n"))
			complete = true
			return
		case engineloss.MoveLost:
			failure = l.lose(ex, rl, mv.Why)
			complete = failure == nil
			return
		}
		d, body, cont = dest{peer: mv.Peer}, mv.Body, mv.Cont
	}
}

func badGateway() *rejection {
	return &rejection{status: http.StatusBadGateway, reason: "upstream_error", typ: "server_error",
		message: "The engine could not be reached.", wait: time.Second}
}
