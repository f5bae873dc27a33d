package admission

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"

	"github.com/vigil-dev/vigil/admission/calls"
	"github.com/vigil-dev/vigil/admission/core"
	"github.com/vigil-dev/vigil/admission/engineloss"
	"github.com/vigil-dev/vigil/admission/inflight"
	"github.com/vigil-dev/vigil/admission/usage"
)

// Relay is one call's way to an engine (engineloss.Relay): sent again,
// elsewhere, when the engine it ran on is lost (see outage).
type relay = engineloss.Relay

// newRelay reads what a call needs to be sent, now and again.
func (l *Limiter) newRelay(r *http.Request, body []byte) *relay {
	return engineloss.NewRelay(r, forwardHeader(r), body, l.node, l.withEngineKey)
}

// dest is where one send goes: the engine (peer nil) or a peer's limiter.
type dest struct{ peer *Peer }

// relayRequest builds the send of body to d.
func (l *Limiter) relayRequest(ctx context.Context, rl *relay, d dest, body []byte) *http.Request {
	return rl.Request(ctx, d.peer, l.engineURL(rl.Path, rl.RawQuery), body, l.out.Expected(l.clock.Now()))
}

// sendResult is how one send of a call ended.
type sendResult int

const (
	sentDone    sendResult = iota // the answer ended, complete or failed for good
	sentCut                       // the engine was lost under it
	sentRefused                   // the peer would not take it
)

// send sends body to d once and tees the answer into ex. cont: the call's
// stream had begun, so the answer must be a stream to splice in after it.
func (l *Limiter) send(ex *calls.Execution, rl *relay, d dest, body []byte, cont bool, tk *core.Listener, o *core.Outcome) (res sendResult, complete bool, failure *rejection) {
	actx, cut := context.WithCancelCause(ex.Context())
	defer cut(nil)
	m := meter{Meter: usage.Meter{Sent: l.clock.Now()}}
	answered := false
	if d.peer == nil {
		m.call = l.startCall(tk, cut)
		l.stallSent(m.call, tk)
		defer func() { l.engineCallDone(m.call, answered, o.CompletionTokens) }()
	}
	// lost: the engine was declared lost under this send (cut, or refusing
	// while it is recovered), and the execution still has a client.
	lost := func() bool {
		return ex.Context().Err() == nil && d.peer == nil && l.cfg.MaxMoves > 0 &&
			(context.Cause(actx) == errEngineLost || l.out.Active())
	}
	// A peer that keeps the call until this engine is back gives it up
	// then (recallable): the call comes home, where it holds its slot.
	sctx, settle := actx, func() bool { return false }
	if d.peer != nil {
		var done func()
		sctx, settle, done = l.recallable(actx)
		defer done()
	}
	resp, err := l.transport.RoundTrip(l.relayRequest(sctx, rl, d, body))
	if settle() {
		if err == nil {
			resp.Body.Close()
		}
		rl.Recalled = true
		return sentRefused, false, nil
	}
	switch {
	case err != nil && lost():
		return sentCut, false, nil
	case err != nil && d.peer != nil && ex.Context().Err() == nil:
		l.log.WithError(err).WithField("peer", d.peer.Node).Debug("admission: peer could not take a moved call")
		return sentRefused, false, nil
	case err != nil:
		if ex.Context().Err() == nil {
			o.Dropped = true
			l.c.upstreamErrors.Add(1)
			l.log.WithError(err).Debug("admission: upstream call failed")
		}
		return sentDone, false, badGateway()
	}
	defer resp.Body.Close()
	if d.peer != nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return sentRefused, false, nil
	}
	m.SSE = isSSE(resp.Header)
	if cont && (resp.StatusCode != http.StatusOK || !m.SSE) {
		l.lose(ex, rl, engineloss.LossRefused)
		return sentDone, true, nil
	}
	o.Dropped = resp.StatusCode >= 500
	l.noteMoved(ex, rl, d, cont)
	if d.peer != nil && tk != nil {
		// The peer runs it now: its slot here goes back to the calls
		// waiting for this engine, or a restarted engine's slow start
		// would find its cap full of calls another node is answering.
		tk.Release(core.Outcome{Cancelled: true, CompletionTokens: -1, TotalTokens: -1})
	}
	if readErr := l.tee(ex, resp, &m, tk, d, cont); readErr != nil {
		if lost() {
			return sentCut, false, nil
		}
		if ex.Context().Err() == nil {
			o.Dropped = true
			l.c.upstreamErrors.Add(1)
		}
		return sentDone, false, nil
	}
	o.Success = resp.StatusCode >= 200 && resp.StatusCode < 300
	o.Streamed = m.SSE
	if tk != nil {
		o.CompletionTokens, o.TotalTokens = m.Tokens(tk.Prompt())
	}
	answered = true
	return sentDone, true, nil
}

// startCall records a call to the engine in flight, cut by cut when the
// engine is lost (moving on), and cuts it at once when the engine is
// already lost: it must not go into a hung engine.
func (l *Limiter) startCall(tk *core.Listener, cut context.CancelCauseFunc) *inflight.Call {
	if l.cfg.MaxMoves == 0 {
		return l.inflight.Start(promptOf(tk), nil)
	}
	c := l.inflight.Start(promptOf(tk), cut)
	if l.out.Active() {
		cut(errEngineLost)
	}
	return c
}

// tee copies the answer from d into ex: a stream whole events at a time
// (spliced in after what was sent when cont), anything else as it comes.
// It returns the read error, nil at a clean end.
func (l *Limiter) tee(ex *calls.Execution, resp *http.Response, m *meter, tk *core.Listener, d dest, cont bool) error {
	if cont || d.peer != nil {
		tk = nil // the first token of a moved call says nothing of this engine's speed
	}
	if !cont {
		l.co.Begin(ex, resp.StatusCode, resp.Header.Clone())
	}
	origID := ""
	var sp engineloss.SpliceState
	if cont {
		so := engineloss.ReadSoFar(ex.Buffered())
		origID, sp.Sent = so.ID, so.Tokens
	}
	var pend engineloss.EventBuffer
	_, readErr := l.pump(resp, m, tk, func(p []byte) error {
		if !m.SSE {
			l.co.Append(ex, p)
			return nil
		}
		whole := pend.Add(p)
		if cont {
			whole = engineloss.SpliceAll(whole, origID, &sp)
		}
		if len(whole) > 0 {
			l.co.Append(ex, whole)
		}
		return nil
	})
	if readErr == nil {
		if rest := pend.Rest(); len(rest) > 0 {
			l.co.Append(ex, rest)
		}
	}
	return readErr
}

// noteMoved counts a cut call that another send took: moved to a peer;
// a stream that had sent text, continued.
func (l *Limiter) noteMoved(ex *calls.Execution, rl *relay, d dest, cont bool) {
	if rl.Moves == 0 {
		return
	}
	if d.peer != nil {
		l.c.moved.Add(1)
		l.out.Note(func(f *Fate) { f.MovedTo[d.peer.Node]++ })
	}
	if cont && engineloss.ReadSoFar(ex.Buffered()).Text != "" {
		l.c.continued.Add(1)
		l.out.Note(func(f *Fate) { f.Continued++ })
	}
}

// lose ends a cut call that cannot move with an error that says why: a
// retryable 503 when none of its answer was sent, else an error event
// at the end of its stream.
func (l *Limiter) lose(ex *calls.Execution, rl *relay, why string) *rejection {
	l.lostCount(why)
	msg := "The engine was lost under this request and vigil could not move it: " + engineloss.LossText[why] + "."
	if ex.Started() {
		l.co.Append(ex, engineloss.ErrorEvent("vigil_"+why, msg))
		l.co.MarkBroken(ex)
		return nil
	}
	return &rejection{status: http.StatusServiceUnavailable, reason: ReasonRecovering, typ: "server_error",
		message: msg + " Retry after the indicated delay.", wait: l.out.Expected(l.clock.Now())}
}

// lostCount counts a lost call by why.
func (l *Limiter) lostCount(why string) {
	l.lostMu.Lock()
	l.lost[why]++
	l.lostMu.Unlock()
	l.out.Note(func(f *Fate) { f.Lost[why]++ })
}

// mover decides where a call cut by a lost engine goes next.
func (l *Limiter) mover() engineloss.Mover {
	return engineloss.Mover{MaxMoves: l.cfg.MaxMoves, Peers: l.peers, Out: &l.out, Holder: holder{l}, Now: l.clock.Now}
}

// holder is the limiter as a Mover holding a call sees it.
type holder struct{ l *Limiter }

func (h holder) CountHeld()        { h.l.c.held.Add(1) }
func (h holder) HoldBytes(n int64) { h.l.core.HoldBytes(n) }

// errRecalled ends a send to a peer that had not begun to answer when
// this vigil's engine was back.
var errRecalled = errors.New("admission: the engine is back; the call comes home")

// recallable is ctx for a send to a peer while this vigil's engine is
// out (an outage is on), ended with errRecalled when the outage ends
// before the peer begins to answer. A peer at its own cap keeps a moved
// call behind its own clients for as long as this vigil expects its
// outage to last (the moved wait: 90 s before one was seen); meanwhile
// the restarted engine here serves its backlog, and a cut call kept
// there holds a slot of this cap. Called home, the call is served here
// at once (a cut call holds its slot; a queued one ranks as queued at
// the verdict, core.Request.Arrived), as with no peer. One the peer has
// admitted is left to it (it says so: engineloss.AdmittedStatus; a plain
// answer sends nothing else before its end), or its work there would be
// lost. settle, called once the send returns, reports whether it was
// recalled and, from then on, lets the peer's answer run; done releases
// ctx.
func (l *Limiter) recallable(ctx context.Context) (sctx context.Context, settle func() (recalled bool), done func()) {
	sctx, cancel := context.WithCancelCause(ctx)
	ch := l.out.WaitCh()
	if ch == nil {
		return sctx, func() bool { return false }, func() { cancel(nil) }
	}
	var mu sync.Mutex
	started, recalled := false, false
	sctx = httptrace.WithClientTrace(sctx, &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
		if code == engineloss.AdmittedStatus {
			mu.Lock()
			started = true
			mu.Unlock()
		}
		return nil
	}})
	stop := make(chan struct{})
	go func() {
		select {
		case <-ch:
			mu.Lock()
			if !started {
				recalled = true
				cancel(errRecalled)
			}
			mu.Unlock()
		case <-stop:
		}
	}()
	settle = func() bool {
		mu.Lock()
		defer mu.Unlock()
		started = true
		return recalled
	}
	return sctx, settle, func() { close(stop); cancel(nil) }
}
