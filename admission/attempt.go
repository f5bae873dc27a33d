package admission

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/vigil-dev/vigil/admission/calls"
	"github.com/vigil-dev/vigil/admission/core"
	"github.com/vigil-dev/vigil/admission/engineloss"
)

// attempt is one request of a call on its way through admission, once
// its call is identified.
type attempt struct {
	l     *Limiter
	w     http.ResponseWriter
	r     *http.Request
	c     *identity
	start time.Time // the client's own timeout runs from about here
}

// find answers the attempt from work its call already has: a keyed call's
// running execution or stored answer, or the orphan of an identical
// keyless request (adopted). It reports whether it did.
func (a *attempt) find() bool {
	l, c := a.l, a.c
	var res *calls.Result
	var ex *calls.Execution
	var cur *calls.Cursor
	switch {
	case c.coalesce:
		res, ex, cur = l.co.Lookup(c.k, l.clock.Now())
	case c.adopt:
		res, ex, cur = l.co.Adopt(c.k, l.clock.Now())
	}
	switch {
	case res != nil:
		a.stored(res)
	case ex != nil:
		a.joined(ex, cur)
	default:
		return false
	}
	return true
}

// stored answers from a finished execution's stored answer.
func (a *attempt) stored(res *calls.Result) {
	if a.c.adopt {
		a.l.c.adoptedStored.Add(1)
		a.l.co.Forget(a.c.k)
	} else {
		a.l.c.stored.Add(1)
		a.found()
	}
	writeResult(a.w, res)
}

// writeResult sends a stored answer whole.
func writeResult(w http.ResponseWriter, res *calls.Result) {
	copyResponseHeader(w.Header(), res.Header)
	w.Header().Set("Content-Length", strconv.Itoa(len(res.Body)))
	w.WriteHeader(res.Status)
	_, _ = w.Write(res.Body)
}

// joined listens to an execution another attempt started.
func (a *attempt) joined(ex *calls.Execution, cur *calls.Cursor) {
	if a.c.adopt {
		a.l.c.adopted.Add(1)
	} else {
		a.l.c.attached.Add(1)
		a.found()
	}
	a.listen(ex, cur)
}

// found counts a keyed retry that found its call's work here.
func (a *attempt) found() {
	if a.c.findable() {
		a.l.c.keyedRetriesFound.Add(1)
	}
}

// acquire asks the core for a slot. When none is granted the client has
// been answered (or has left) and ok is false. While the engine is held
// (suspected stalled or recovered) a call goes to a pool peer first, and
// so does a queued one the core diverts; one no peer takes waits here.
func (a *attempt) acquire(body []byte, info *requestInfo) (tk *core.Listener, ok bool) {
	l, c := a.l, a.c
	if l.holdsEngine() && a.toPeer(body) {
		return nil, false
	}
	prompt, tokens := estimateTokens(body, info)
	req := core.Request{Tenant: c.tenant, Tokens: tokens, Prompt: prompt,
		Retry: c.retry, NeverExecuted: c.neverExecuted, Timeout: c.timeout, Route: c.route, Stream: info.Stream,
		Keyed: c.holdsPlace(), Coalesced: c.outlives(), Key: c.k, Bytes: int64(len(body)),
		Undivertible: l.peerFor(a.r) == nil, Arrived: a.start}
	if a.r.Header.Get(engineloss.MovedFromHeader) != "" {
		req.Moved, req.MaxWait = true, engineloss.MovedWait(a.r)
	}
	for {
		queuedAt, held := l.clock.Now(), l.holdsEngine() || l.core.Holding()
		tk, rj, err := l.core.Acquire(a.r.Context(), req)
		switch {
		case errors.Is(err, core.ErrDiverted):
			if a.toPeer(body) {
				return nil, false
			}
			req.Undivertible, req.Diverted = true, true // the peer would not take it: it waits here
			continue
		case err != nil:
			a.leftUnanswered(false) // the client left while queued; nobody to answer
			return nil, false
		case rj != nil:
			if c.adopt {
				l.co.MarkUnanswered(c.k, false, l.clock.Now())
			}
			l.reject(a.w, fromCore(rj))
			return nil, false
		}
		if d := l.clock.Now().Sub(queuedAt); d >= time.Millisecond && (held || tk.HeldWait() || l.holdsEngine() || l.core.Holding()) {
			l.out.Queued(d)
		}
		if req.Moved {
			a.w.WriteHeader(engineloss.AdmittedStatus) // its home calls it back no more (recallable)
		}
		return tk, true
	}
}

// run executes the call in the slot tk grants: shared by its attempts
// (keyed, coalesced), adoptable (keyless), or in the client's goroutine
// and cancelled with it (coalescing or deferred cancellation off).
func (a *attempt) run(tk *core.Listener, body []byte) {
	l, c := a.l, a.c
	switch {
	case c.coalesce:
		a.runShared(tk, body)
	case c.adopt:
		ex, cur := l.co.StartAdoptable(c.k, l.base)
		a.execute(ex, cur, tk, body)
	default:
		if c.keyed() {
			l.co.MarkExecuted(c.k, l.clock.Now())
		}
		req := l.upstreamRequest(a.r.Context(), a.r, bytes.NewReader(body), int64(len(body)))
		l.c.executions.Add(1)
		if l.forward(a.w, a.r, req, tk) {
			a.leftUnanswered(false)
		}
	}
}

// runShared starts a keyed call's execution, unless another attempt of
// the call started one (or finished) while this one queued for its slot.
func (a *attempt) runShared(tk *core.Listener, body []byte) {
	l := a.l
	res, ex, cur, created := l.co.Start(a.c.k, l.base, l.clock.Now())
	switch {
	case res != nil:
		tk.Ignore()
		a.stored(res)
	case !created:
		tk.Ignore()
		a.joined(ex, cur)
	default:
		a.execute(ex, cur, tk, body)
	}
}

// execute runs ex upstream in its own goroutine, which outlives the
// attempt, and streams its answer to this client.
func (a *attempt) execute(ex *calls.Execution, cur *calls.Cursor, tk *core.Listener, body []byte) {
	l := a.l
	l.c.executions.Add(1)
	go l.execute(ex, l.newRelay(a.r, body), tk)
	a.listen(ex, cur)
}

// listen streams ex's answer to this client. A keyless call whose answer
// reached its client is done: an identical request after it is another
// call.
func (a *attempt) listen(ex *calls.Execution, cur *calls.Cursor) {
	cur.SDKRetry = a.c.sdkRetry
	if a.l.listen(a.w, a.r, ex, cur) {
		a.leftUnanswered(true)
	} else if a.c.adopt {
		a.l.co.Forget(a.c.k)
	}
}

// leftUnanswered notes a client that left before its answer began
// (executed: its execution runs on, orphaned). For the route's inferred
// timeout (only clients that announce none): a keyed call's is confirmed
// by its retry, an unkeyed one's counts at once. A keyless call's retry
// is then known for one. A retry's wait teaches nothing: a client whose
// one timeout covers its retries (the AI SDK's abort) sends one late in
// that timeout, and its short wait read as the route's timeout (0.4 s for
// clients of 6 s, issue 41); the first attempt's wait is the whole of it.
func (a *attempt) leftUnanswered(executed bool) {
	l, c := a.l, a.c
	now := l.clock.Now()
	if c.adopt {
		l.co.MarkUnanswered(c.k, executed, now)
	}
	switch d := now.Sub(a.start); {
	case c.timeout > 0, c.retry:
	case c.keyed():
		l.co.MarkGaveUp(c.k, d)
	default:
		l.core.GaveUp(c.route, d)
	}
}
