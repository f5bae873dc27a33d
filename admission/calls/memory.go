package calls

import (
	"container/list"
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// maxReplayBytes is the most one execution keeps for listeners that
	// attach late; a longer answer still streams to those already listening
	// but no longer coalesces.
	maxReplayBytes = 16 << 20
	// minLiveBytes is the floor of the memory all running executions may
	// keep for replay together (result_store_bytes when larger).
	minLiveBytes = 16 << 20
	// seenTTL and seenMax bound the memory of which call keys were seen:
	// enough for a client's three retries after 120 s timeouts.
	seenTTL = 10 * time.Minute
	seenMax = 32768
)

// Config is what the memory keeps and for how long (configs.Admission's
// cancel_after, result_ttl and result_store_bytes).
type Config struct {
	// CancelAfter is how long an execution whose last listener left is
	// kept for a retry to attach; 0 cancels it at once.
	CancelAfter time.Duration
	// ResultTTL and StoreBytes bound the finished answers kept; a TTL of
	// 0 keeps none.
	ResultTTL  time.Duration
	StoreBytes int64
}

// Clock is the memory's timer: deferred cancellations run on it, so a
// time-scaled engine's clock scales them too (core.Clock satisfies it).
type Clock interface {
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// Hooks are told of cancellations, for the limiter's counters; either may
// be nil.
type Hooks struct {
	// Deferred: an execution nobody attached to within its deferral.
	// Immediate: an execution whose last listener left and no retry
	// could find it.
	Deferred, Immediate func()
}

// Memory indexes running executions and finished results by call Key,
// and remembers the keys seen recently.
type Memory struct {
	cancelAfter time.Duration
	maxLive     int64
	clock       Clock
	hooks       Hooks

	live atomic.Int64 // bytes kept for replay by running executions

	mu      sync.Mutex
	running map[Key]*Execution
	// orphans are the adoptable executions whose every listener left
	// before their answer began, by fingerprint.
	orphans map[Key][]*Execution
	store   *resultStore
	seen    *seenKeys
}

// New is an empty memory.
func New(cfg Config, clock Clock, hooks Hooks) *Memory {
	if hooks.Deferred == nil {
		hooks.Deferred = func() {}
	}
	if hooks.Immediate == nil {
		hooks.Immediate = func() {}
	}
	return &Memory{
		cancelAfter: cfg.CancelAfter,
		maxLive:     max(minLiveBytes, cfg.StoreBytes),
		clock:       clock,
		hooks:       hooks,
		running:     map[Key]*Execution{},
		orphans:     map[Key][]*Execution{},
		store:       newResultStore(cfg.ResultTTL, cfg.StoreBytes),
		seen:        &seenKeys{ttl: seenTTL, max: seenMax, byKey: map[Key]*list.Element{}},
	}
}

// MarkSeen records a call key and reports whether it was seen before (an
// attempt whose key is known is a retry) and whether any attempt of it got
// an execution: only then can a retry amplify work. gaveUp is how long
// the previous attempt's client waited before it left without an answer
// (0: it did not); a retry confirms that was its timeout. It is reported
// once.
func (m *Memory) MarkSeen(k Key, now time.Time) (seen, executed bool, gaveUp time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seen.mark(k, now)
}

// Unanswered reports whether an attempt of the keyless call fp ended
// without its answer within seenTTL (its client left, or was turned away),
// and whether any such attempt had an execution.
func (m *Memory) Unanswered(fp Key, now time.Time) (seen, executed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.seen.byKey[fp]
	if !ok {
		return false, false
	}
	ent := e.Value.(*seenEntry)
	if now.Sub(ent.at) > m.seen.ttl {
		return false, false
	}
	return true, ent.executed
}

// MarkUnanswered records that an attempt of the keyless call fp ended
// without its answer; executed: it had an execution (orphaned now).
// Its retry is then known for one, whether or not the SDK marks it.
func (m *Memory) MarkUnanswered(fp Key, executed bool, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.seen.byKey[fp]
	if ok {
		e.Value.(*seenEntry).at = now
		m.seen.lru.MoveToFront(e)
	} else {
		e = m.seen.insert(fp, now)
	}
	if executed {
		e.Value.(*seenEntry).executed = true
	}
}

// Forget drops what is known of the keyless call fp: its answer reached a
// client, so an identical request after it is another call.
func (m *Memory) Forget(fp Key) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.seen.byKey[fp]; ok {
		m.seen.lru.Remove(e)
		delete(m.seen.byKey, fp)
	}
}

// MarkGaveUp records that an attempt of call k (announcing no timeout)
// left after waiting d for an answer that had not begun.
func (m *Memory) MarkGaveUp(k Key, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.seen.byKey[k]; ok {
		e.Value.(*seenEntry).gaveUp = d
	}
}

// GaveUp counts the calls whose last attempt left unanswered, waiting
// for their retry to tell it was the client's timeout (MarkGaveUp).
func (m *Memory) GaveUp() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, e := range m.seen.byKey {
		if e.Value.(*seenEntry).gaveUp > 0 {
			n++
		}
	}
	return n
}

// MarkExecuted records that an attempt of call k started an execution, so
// its later retries count against the retry budget.
func (m *Memory) MarkExecuted(k Key, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seen.executed(k, now)
}

// Lookup finds a running execution to attach to (with a new cursor) or a
// stored result; both nil when the call must run.
func (m *Memory) Lookup(k Key, now time.Time) (*Result, *Execution, *Cursor) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ex := m.running[k]; ex != nil {
		if cur := ex.attach(); cur != nil {
			return nil, ex, cur
		}
	}
	return m.store.get(k, now), nil, nil
}

// Start registers a new execution for k, unless another attempt of the
// same call started one (or finished) while this one queued for its slot.
func (m *Memory) Start(k Key, parent context.Context, now time.Time) (*Result, *Execution, *Cursor, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ex := m.running[k]; ex != nil {
		if cur := ex.attach(); cur != nil {
			return nil, ex, cur, false
		}
	}
	if res := m.store.get(k, now); res != nil {
		return res, nil, nil, false
	}
	ex, cur := newExecution(k, false, parent)
	m.running[k] = ex
	m.seen.executed(k, now)
	return nil, ex, cur, true
}

// StartAdoptable registers a keyless call's execution under its
// fingerprint fp: adoptable once orphaned, never attached to while a
// client listens.
func (m *Memory) StartAdoptable(fp Key, parent context.Context) (*Execution, *Cursor) {
	return newExecution(fp, true, parent)
}

// Adopt hands a keyless request the answer of an identical request whose
// client left before it began: a stored one (taken, so no second client
// gets it) or an orphaned execution still running (with a new cursor).
func (m *Memory) Adopt(fp Key, now time.Time) (*Result, *Execution, *Cursor) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if res := m.store.take(fp, now); res != nil {
		return res, nil, nil
	}
	for _, ex := range m.orphans[fp] {
		if cur := ex.attach(); cur != nil {
			m.unindexLocked(ex)
			return nil, ex, cur
		}
	}
	return nil, nil, nil
}

func (m *Memory) unindexLocked(ex *Execution) {
	if !ex.adoptable {
		if m.running[ex.k] == ex {
			delete(m.running, ex.k)
		}
		return
	}
	list := m.orphans[ex.k]
	for i, o := range list {
		if o == ex {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(m.orphans, ex.k)
	} else {
		m.orphans[ex.k] = list
	}
}

// sdkBackoff bounds the OpenAI SDKs' wait before the retry that follows
// attempt n (0.5 s doubling, at most 8 s, less up to 25% jitter).
func sdkBackoff(n int) time.Duration {
	return min(500*time.Millisecond<<min(n, 5), 8*time.Second)
}

// deferFor is how long an execution whose last listener left is kept
// for a retry to find: cancel_after, and at least until an SDK-marked
// attempt's retry is due (its backoff, plus a second for the request to
// arrive), so a short cancel_after does not cancel work the retry comes
// back for.
func (m *Memory) deferFor(cur *Cursor) time.Duration {
	if cur.SDKRetry < 0 {
		return m.cancelAfter
	}
	return max(m.cancelAfter, sdkBackoff(cur.SDKRetry)+time.Second)
}

// Leave removes a listener (sent: its answer had begun). When it was the
// last one and the answer is not finished, the upstream call is cancelled
// after cancel_after (a retry may attach meanwhile) or at once when no
// retry could attach. A keyless call's is kept only when its client is an
// SDK that retries a timeout (it sends X-Stainless-Retry-Count) and saw
// none of the answer: a client that does not retry would leave the
// engine running work nobody comes back for, and an answer a client saw
// part of is nobody else's to adopt.
func (m *Memory) Leave(ex *Execution, cur *Cursor, sent bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ex.mu.Lock()
	defer ex.mu.Unlock()
	delete(ex.cursors, cur)
	if len(ex.cursors) > 0 || ex.done || ex.cancelled {
		ex.trimLocked()
		return
	}
	if m.cancelAfter > 0 && ex.replay && (!ex.adoptable || (!sent && cur.SDKRetry >= 0)) {
		if ex.adoptable {
			m.orphans[ex.k] = append(m.orphans[ex.k], ex)
		}
		ex.stopTimer = m.clock.AfterFunc(m.deferFor(cur), func() { m.expire(ex) })
		return
	}
	ex.cancelled = true
	m.unindexLocked(ex)
	ex.cancel()
	m.hooks.Immediate()
}

// expire is the deferred cancellation: nobody attached within cancel_after.
func (m *Memory) expire(ex *Execution) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if len(ex.cursors) > 0 || ex.done || ex.cancelled {
		return
	}
	ex.stopTimer = nil
	ex.cancelled = true
	m.unindexLocked(ex)
	ex.cancel()
	m.hooks.Deferred()
}

// Begin publishes the answer's status and header.
func (m *Memory) Begin(ex *Execution, status int, h http.Header) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	ex.status, ex.header, ex.started = status, h, true
	ex.notifyLocked()
}

// Append adds a piece of the answer for every listener.
func (m *Memory) Append(ex *Execution, p []byte) {
	ex.mu.Lock()
	ex.buf = append(ex.buf, p...)
	unindex := false
	if ex.replay && (m.live.Add(int64(len(p))) > m.maxLive || len(ex.buf) > maxReplayBytes) {
		// Too big to keep whole: stream on to the current listeners only.
		ex.replay = false
		m.live.Add(-int64(len(ex.buf)))
		unindex = true
	}
	ex.trimLocked()
	ex.notifyLocked()
	ex.mu.Unlock()
	if unindex {
		m.mu.Lock()
		m.unindexLocked(ex)
		m.mu.Unlock()
	}
}

// MarkBroken marks an answer that ends with an error event.
func (m *Memory) MarkBroken(ex *Execution) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	ex.broken = true
}

// Finish ends an execution; a complete 2xx answer is stored for late
// retries.
func (m *Memory) Finish(ex *Execution, complete bool, failure Failure, now time.Time) {
	ex.mu.Lock()
	ex.done, ex.complete = true, complete
	if !ex.started && failure != nil {
		ex.failure = failure
	}
	if ex.stopTimer != nil {
		ex.stopTimer()
		ex.stopTimer = nil
	}
	// A keyless answer is stored only when nobody heard it: its clients
	// left before it finished.
	storable := complete && ex.replay && !ex.cancelled && !ex.broken && ex.status >= 200 && ex.status < 300 &&
		(!ex.adoptable || len(ex.cursors) == 0)
	if ex.replay {
		m.live.Add(-int64(len(ex.buf)))
	}
	res := &Result{k: ex.k, Status: ex.status, Header: ex.header, Body: ex.buf, at: now}
	ex.notifyLocked()
	ex.mu.Unlock()
	m.mu.Lock()
	m.unindexLocked(ex)
	if storable {
		m.store.put(res, now)
	}
	m.mu.Unlock()
	ex.cancel()
}

// CloseAll cancels every running execution.
func (m *Memory) CloseAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ex := range m.running {
		ex.cancel()
	}
}

// Stats reports what the store holds, the keyed executions running and
// the executions, keyed or not, whose every listener left (kept for a
// retry).
func (m *Memory) Stats() (results int, bytes int64, running, orphans int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, list := range m.orphans {
		orphans += len(list)
	}
	for _, ex := range m.running {
		ex.mu.Lock()
		if len(ex.cursors) == 0 && !ex.done && !ex.cancelled {
			orphans++
		}
		ex.mu.Unlock()
	}
	return m.store.lru.Len(), m.store.bytes, len(m.running), orphans
}
