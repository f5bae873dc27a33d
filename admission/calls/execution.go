package calls

import (
	"context"
	"net/http"
	"sync"
)

// Failure is how an execution that failed before its answer began is
// answered to each of its listeners (the admission package's rejection).
type Failure interface {
	Write(w http.ResponseWriter)
}

// Execution is one upstream call shared by every attempt of a keyed call.
// It runs in its own goroutine under its own context, so it outlives the
// attempt that created it: a client that times out and retries finds its
// work still going and attaches to it as another listener.
//
// An adoptable execution is a keyless call's: indexed by its fingerprint
// only while it has no listener (an orphan), so two live clients never
// share one, and a retry of the same request adopts it.
type Execution struct {
	k         Key
	adoptable bool
	ctx       context.Context
	cancel    context.CancelFunc

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every change
	started   bool          // status and header are known
	status    int
	header    http.Header
	buf       []byte // the answer from byte base on
	base      int
	replay    bool // buf holds the whole answer: late listeners can attach
	done      bool
	complete  bool    // read to its end
	failure   Failure // failed before any header
	cursors   map[*Cursor]struct{}
	stopTimer func() bool // pending deferred cancellation
	cancelled bool
	// broken: the answer ended with an error event (a stream vigil could
	// not continue); never stored.
	broken bool
}

// Cursor is one listener's position in an execution's answer.
type Cursor struct {
	off int
	// SDKRetry is the X-Stainless-Retry-Count its attempt carried (-1:
	// none): an SDK that retries is waited for (Memory.Leave). Set it
	// before the listener may leave.
	SDKRetry int
}

func newExecution(k Key, adoptable bool, parent context.Context) (*Execution, *Cursor) {
	ctx, cancel := context.WithCancel(parent)
	ex := &Execution{k: k, adoptable: adoptable, ctx: ctx, cancel: cancel, changed: make(chan struct{}),
		replay: true, cursors: map[*Cursor]struct{}{}}
	cur := &Cursor{SDKRetry: -1}
	ex.cursors[cur] = struct{}{}
	return ex, cur
}

// Context is the execution's own: cancelled when nobody is left to
// listen (after the deferral), when it finishes, or when the memory
// closes.
func (ex *Execution) Context() context.Context { return ex.ctx }

// Started reports whether the answer's status and header are known: a
// listener may have been sent some of it.
func (ex *Execution) Started() bool {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return ex.started
}

// Header is the answer's header; nil until it started.
func (ex *Execution) Header() http.Header {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return ex.header
}

// Whole reports whether the buffer still holds the answer from its first
// byte.
func (ex *Execution) Whole() bool {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return ex.base == 0
}

// Buffered is the answer as buffered: from its first byte when Whole. The
// bytes are never written again, so they may be read after the call.
func (ex *Execution) Buffered() []byte {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return ex.buf[:len(ex.buf):len(ex.buf)]
}

// Progress is what one listener has yet to send of an execution's answer.
type Progress struct {
	// Started: Status and Header are known. Chunk is the part of the
	// answer that follows what the cursor already sent (it has moved).
	Started bool
	Status  int
	Header  http.Header
	Chunk   []byte
	// Done: the answer ended, Complete when read to its end; Failure
	// answers a listener when it ended before it started.
	Done, Complete bool
	Failure        Failure
	// Changed is closed on the execution's next change.
	Changed <-chan struct{}
}

// Next reads the answer past cur and moves cur past it.
func (ex *Execution) Next(cur *Cursor) Progress {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	p := Progress{Started: ex.started, Status: ex.status, Header: ex.header,
		Done: ex.done, Complete: ex.complete, Failure: ex.failure, Changed: ex.changed}
	if ex.started {
		p.Chunk = ex.buf[cur.off-ex.base:]
		cur.off += len(p.Chunk)
	}
	return p
}

func (ex *Execution) notifyLocked() {
	close(ex.changed)
	ex.changed = make(chan struct{})
}

// attach adds a listener, stopping a pending deferred cancellation; nil when
// the execution can no longer be attached to.
func (ex *Execution) attach() *Cursor {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.cancelled || !ex.replay {
		return nil
	}
	if ex.stopTimer != nil {
		ex.stopTimer()
		ex.stopTimer = nil
	}
	c := &Cursor{SDKRetry: -1}
	ex.cursors[c] = struct{}{}
	return c
}

// trimLocked frees the part of a non-replayable answer every listener has
// already sent.
func (ex *Execution) trimLocked() {
	if ex.replay {
		return
	}
	lo := ex.base + len(ex.buf)
	for c := range ex.cursors {
		lo = min(lo, c.off)
	}
	drop := lo - ex.base
	switch {
	case drop == 0:
		return
	case drop == len(ex.buf):
		ex.buf = nil
	case drop >= len(ex.buf)/2:
		ex.buf = append([]byte(nil), ex.buf[drop:]...)
	default:
		return
	}
	ex.base = lo
}
