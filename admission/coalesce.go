package admission

import (
	"container/list"
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigil-dev/vigil/admission/core"
	"github.com/vigil-dev/vigil/configs"
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

// key identifies one call: the tenant's key hash, the idempotency key, the
// method, the path with its query, and the body, hashed with SHA-256 so that
// a reused idempotency key with another body is another call.
type key = core.CallKey

func coalesceKey(tenant, idem, method, uri string, body []byte) key {
	h := sha256.New()
	for _, s := range [...]string{tenant, idem, method, uri} {
		_, _ = io.WriteString(h, s)
		_, _ = h.Write([]byte{0})
	}
	_, _ = h.Write(body)
	var k key
	h.Sum(k[:0])
	return k
}

// fingerprint identifies a call without an idempotency key: the tenant's
// key hash, the method, the path with its query and the exact body. It is
// never equal to a coalesceKey (another domain), so a keyless call never
// finds a keyed one's execution.
func fingerprint(tenant, method, uri string, body []byte) key {
	h := sha256.New()
	for _, s := range [...]string{"fingerprint", tenant, method, uri} {
		_, _ = io.WriteString(h, s)
		_, _ = h.Write([]byte{0})
	}
	_, _ = h.Write(body)
	var k key
	h.Sum(k[:0])
	return k
}

// execution is one upstream call shared by every attempt of a keyed call.
// It runs in its own goroutine under its own context, so it outlives the
// attempt that created it: a client that times out and retries finds its
// work still going and attaches to it as another listener.
//
// An adoptable execution is a keyless call's: indexed by its fingerprint
// only while it has no listener (an orphan), so two live clients never
// share one, and a retry of the same request adopts it.
type execution struct {
	k         key
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
	complete  bool       // read to its end
	failure   *rejection // failed before any header
	cursors   map[*cursor]struct{}
	stopTimer func() bool // pending deferred cancellation
	cancelled bool
	// broken: the answer ended with an error event (a stream vigil could
	// not continue); never stored.
	broken bool
}

// isStarted reports whether the answer's status and header are known: a
// listener may have been sent some of it.
func (ex *execution) isStarted() bool {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return ex.started
}

// isSSE reports whether the answer is an event stream.
func (ex *execution) isSSE() bool {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return ex.started && isSSE(ex.header)
}

// whole reports whether the buffer still holds the answer from its first
// byte.
func (ex *execution) whole() bool {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return ex.base == 0
}

// sofar reads what the answer's listeners were sent (see readSofar).
func (ex *execution) sofar() sofar {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	return readSofar(ex.buf)
}

// cursor is one listener's position in an execution's answer; sdkRetry
// is the X-Stainless-Retry-Count its attempt carried (-1: none).
type cursor struct{ off, sdkRetry int }

func (ex *execution) notifyLocked() {
	close(ex.changed)
	ex.changed = make(chan struct{})
}

// attach adds a listener, stopping a pending deferred cancellation; nil when
// the execution can no longer be attached to.
func (ex *execution) attach() *cursor {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.cancelled || !ex.replay {
		return nil
	}
	if ex.stopTimer != nil {
		ex.stopTimer()
		ex.stopTimer = nil
	}
	c := &cursor{sdkRetry: -1}
	ex.cursors[c] = struct{}{}
	return c
}

// trimLocked frees the part of a non-replayable answer every listener has
// already sent.
func (ex *execution) trimLocked() {
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

// coalescer indexes running executions and finished results by call key.
type coalescer struct {
	cancelAfter time.Duration
	maxLive     int64
	clock       Clock
	onDeferred  func()
	onImmediate func()

	live atomic.Int64 // bytes kept for replay by running executions

	mu      sync.Mutex
	running map[key]*execution
	// orphans are the adoptable executions whose every listener left
	// before their answer began, by fingerprint.
	orphans map[key][]*execution
	store   *resultStore
	seen    *seenKeys
}

func newCoalescer(cfg configs.Admission, clock Clock, onDeferred, onImmediate func()) *coalescer {
	return &coalescer{
		cancelAfter: cfg.CancelAfter,
		maxLive:     max(minLiveBytes, cfg.ResultStoreBytes),
		clock:       clock,
		onDeferred:  onDeferred,
		onImmediate: onImmediate,
		running:     map[key]*execution{},
		orphans:     map[key][]*execution{},
		store:       newResultStore(cfg.ResultTTL, cfg.ResultStoreBytes),
		seen:        &seenKeys{ttl: seenTTL, max: seenMax, byKey: map[key]*list.Element{}},
	}
}

// markSeen records a call key and reports whether it was seen before (an
// attempt whose key is known is a retry) and whether any attempt of it got
// an execution: only then can a retry amplify work. gaveUp is how long
// the previous attempt's client waited before it left without an answer
// (0: it did not); a retry confirms that was its timeout. It is reported
// once.
func (c *coalescer) markSeen(k key, now time.Time) (seen, executed bool, gaveUp time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen.mark(k, now)
}

// unanswered reports whether an attempt of the keyless call fp ended
// without its answer within seenTTL (its client left, or was turned away),
// and whether any such attempt had an execution.
func (c *coalescer) unanswered(fp key, now time.Time) (seen, executed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.seen.byKey[fp]
	if !ok {
		return false, false
	}
	ent := e.Value.(*seenEntry)
	if now.Sub(ent.at) > c.seen.ttl {
		return false, false
	}
	return true, ent.executed
}

// markUnanswered records that an attempt of the keyless call fp ended
// without its answer; executed: it had an execution (orphaned now).
// Its retry is then known for one, whether or not the SDK marks it.
func (c *coalescer) markUnanswered(fp key, executed bool, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.seen.byKey[fp]
	if ok {
		e.Value.(*seenEntry).at = now
		c.seen.lru.MoveToFront(e)
	} else {
		e = c.seen.insert(fp, now)
	}
	if executed {
		e.Value.(*seenEntry).executed = true
	}
}

// forget drops what is known of the keyless call fp: its answer reached a
// client, so an identical request after it is another call.
func (c *coalescer) forget(fp key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.seen.byKey[fp]; ok {
		c.seen.lru.Remove(e)
		delete(c.seen.byKey, fp)
	}
}

// markGaveUp records that an attempt of call k (announcing no timeout)
// left after waiting d for an answer that had not begun.
func (c *coalescer) markGaveUp(k key, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.seen.byKey[k]; ok {
		e.Value.(*seenEntry).gaveUp = d
	}
}

// markExecuted records that an attempt of call k started an execution, so
// its later retries count against the retry budget.
func (c *coalescer) markExecuted(k key, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen.executed(k, now)
}

// lookup finds a running execution to attach to (with a new cursor) or a
// stored result; both nil when the call must run.
func (c *coalescer) lookup(k key, now time.Time) (*result, *execution, *cursor) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ex := c.running[k]; ex != nil {
		if cur := ex.attach(); cur != nil {
			return nil, ex, cur
		}
	}
	return c.store.get(k, now), nil, nil
}

// start registers a new execution for k, unless another attempt of the
// same call started one (or finished) while this one queued for its slot.
func (c *coalescer) start(k key, parent context.Context, now time.Time) (*result, *execution, *cursor, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ex := c.running[k]; ex != nil {
		if cur := ex.attach(); cur != nil {
			return nil, ex, cur, false
		}
	}
	if res := c.store.get(k, now); res != nil {
		return res, nil, nil, false
	}
	ex, cur := newExecution(k, false, parent)
	c.running[k] = ex
	c.seen.executed(k, now)
	return nil, ex, cur, true
}

// startAdoptable registers a keyless call's execution under its
// fingerprint fp: adoptable once orphaned, never attached to while a
// client listens.
func (c *coalescer) startAdoptable(fp key, parent context.Context) (*execution, *cursor) {
	return newExecution(fp, true, parent)
}

func newExecution(k key, adoptable bool, parent context.Context) (*execution, *cursor) {
	ctx, cancel := context.WithCancel(parent)
	ex := &execution{k: k, adoptable: adoptable, ctx: ctx, cancel: cancel, changed: make(chan struct{}),
		replay: true, cursors: map[*cursor]struct{}{}}
	cur := &cursor{sdkRetry: -1}
	ex.cursors[cur] = struct{}{}
	return ex, cur
}

// adopt hands a keyless request the answer of an identical request whose
// client left before it began: a stored one (taken, so no second client
// gets it) or an orphaned execution still running (with a new cursor).
func (c *coalescer) adopt(fp key, now time.Time) (*result, *execution, *cursor) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if res := c.store.take(fp, now); res != nil {
		return res, nil, nil
	}
	for _, ex := range c.orphans[fp] {
		if cur := ex.attach(); cur != nil {
			c.unindexLocked(ex)
			return nil, ex, cur
		}
	}
	return nil, nil, nil
}

func (c *coalescer) unindexLocked(ex *execution) {
	if !ex.adoptable {
		if c.running[ex.k] == ex {
			delete(c.running, ex.k)
		}
		return
	}
	list := c.orphans[ex.k]
	for i, o := range list {
		if o == ex {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(c.orphans, ex.k)
	} else {
		c.orphans[ex.k] = list
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
func (c *coalescer) deferFor(cur *cursor) time.Duration {
	if cur.sdkRetry < 0 {
		return c.cancelAfter
	}
	return max(c.cancelAfter, sdkBackoff(cur.sdkRetry)+time.Second)
}

// leave removes a listener (sent: its answer had begun). When it was the
// last one and the answer is not finished, the upstream call is cancelled
// after cancel_after (a retry may attach meanwhile) or at once when no
// retry could attach. A keyless call's is kept only when its client is an
// SDK that retries a timeout (it sends X-Stainless-Retry-Count) and saw
// none of the answer: a client that does not retry would leave the
// engine running work nobody comes back for, and an answer a client saw
// part of is nobody else's to adopt.
func (c *coalescer) leave(ex *execution, cur *cursor, sent bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ex.mu.Lock()
	defer ex.mu.Unlock()
	delete(ex.cursors, cur)
	if len(ex.cursors) > 0 || ex.done || ex.cancelled {
		ex.trimLocked()
		return
	}
	if c.cancelAfter > 0 && ex.replay && (!ex.adoptable || (!sent && cur.sdkRetry >= 0)) {
		if ex.adoptable {
			c.orphans[ex.k] = append(c.orphans[ex.k], ex)
		}
		ex.stopTimer = c.clock.AfterFunc(c.deferFor(cur), func() { c.expire(ex) })
		return
	}
	ex.cancelled = true
	c.unindexLocked(ex)
	ex.cancel()
	c.onImmediate()
}

// expire is the deferred cancellation: nobody attached within cancel_after.
func (c *coalescer) expire(ex *execution) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if len(ex.cursors) > 0 || ex.done || ex.cancelled {
		return
	}
	ex.stopTimer = nil
	ex.cancelled = true
	c.unindexLocked(ex)
	ex.cancel()
	c.onDeferred()
}

// begin publishes the answer's status and header.
func (c *coalescer) begin(ex *execution, status int, h http.Header) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	ex.status, ex.header, ex.started = status, h, true
	ex.notifyLocked()
}

// append adds a piece of the answer for every listener.
func (c *coalescer) append(ex *execution, p []byte) {
	ex.mu.Lock()
	ex.buf = append(ex.buf, p...)
	unindex := false
	if ex.replay && (c.live.Add(int64(len(p))) > c.maxLive || len(ex.buf) > maxReplayBytes) {
		// Too big to keep whole: stream on to the current listeners only.
		ex.replay = false
		c.live.Add(-int64(len(ex.buf)))
		unindex = true
	}
	ex.trimLocked()
	ex.notifyLocked()
	ex.mu.Unlock()
	if unindex {
		c.mu.Lock()
		c.unindexLocked(ex)
		c.mu.Unlock()
	}
}

// markBroken marks an answer that ends with an error event.
func (c *coalescer) markBroken(ex *execution) {
	ex.mu.Lock()
	defer ex.mu.Unlock()
	ex.broken = true
}

// finish ends an execution; a complete 2xx answer is stored for late
// retries.
func (c *coalescer) finish(ex *execution, complete bool, failure *rejection, now time.Time) {
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
		c.live.Add(-int64(len(ex.buf)))
	}
	res := &result{k: ex.k, status: ex.status, header: ex.header, body: ex.buf, at: now}
	ex.notifyLocked()
	ex.mu.Unlock()
	c.mu.Lock()
	c.unindexLocked(ex)
	if storable {
		c.store.put(res, now)
	}
	c.mu.Unlock()
	ex.cancel()
}

// closeAll cancels every running execution.
func (c *coalescer) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ex := range c.running {
		ex.cancel()
	}
}

// stats reports what the store holds, the keyed executions running and
// the executions, keyed or not, whose every listener left (kept for a
// retry).
func (c *coalescer) stats() (results int, bytes int64, running, orphans int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, list := range c.orphans {
		orphans += len(list)
	}
	for _, ex := range c.running {
		ex.mu.Lock()
		if len(ex.cursors) == 0 && !ex.done && !ex.cancelled {
			orphans++
		}
		ex.mu.Unlock()
	}
	return c.store.lru.Len(), c.store.bytes, len(c.running), orphans
}

// result is a finished 2xx answer kept for retries that arrive after it.
type result struct {
	k      key
	status int
	header http.Header
	body   []byte
	at     time.Time
	size   int64
}

func (res *result) write(w http.ResponseWriter) {
	copyResponseHeader(w.Header(), res.header)
	w.Header().Set("Content-Length", strconv.Itoa(len(res.body)))
	w.WriteHeader(res.status)
	_, _ = w.Write(res.body)
}

// resultStore is an LRU of results bounded by age and total bytes.
type resultStore struct {
	ttl      time.Duration
	maxBytes int64
	bytes    int64
	lru      list.List // of *result, most recent first
	byKey    map[key]*list.Element
}

func newResultStore(ttl time.Duration, maxBytes int64) *resultStore {
	return &resultStore{ttl: ttl, maxBytes: maxBytes, byKey: map[key]*list.Element{}}
}

func (s *resultStore) get(k key, now time.Time) *result {
	e, ok := s.byKey[k]
	if !ok {
		return nil
	}
	res := e.Value.(*result)
	if now.Sub(res.at) > s.ttl {
		s.remove(e)
		return nil
	}
	s.lru.MoveToFront(e)
	return res
}

// take is get, and the result leaves the store.
func (s *resultStore) take(k key, now time.Time) *result {
	res := s.get(k, now)
	if res != nil {
		s.remove(s.byKey[k])
	}
	return res
}

func (s *resultStore) remove(e *list.Element) {
	res := s.lru.Remove(e).(*result)
	delete(s.byKey, res.k)
	s.bytes -= res.size
}

func (s *resultStore) put(res *result, now time.Time) {
	res.size = int64(len(res.body)) + 256
	for k, v := range res.header {
		res.size += int64(len(k))
		for _, x := range v {
			res.size += int64(len(x))
		}
	}
	// One answer may take at most a quarter of the store.
	if s.ttl <= 0 || res.size > s.maxBytes/4 {
		return
	}
	if e, ok := s.byKey[res.k]; ok {
		s.remove(e)
	}
	s.byKey[res.k] = s.lru.PushFront(res)
	s.bytes += res.size
	for s.lru.Len() > 0 {
		back := s.lru.Back()
		if s.bytes <= s.maxBytes && now.Sub(back.Value.(*result).at) <= s.ttl {
			break
		}
		s.remove(back)
	}
}

// seenKeys remembers recent call keys, bounded by age and count.
type seenKeys struct {
	ttl   time.Duration
	max   int
	lru   list.List // of *seenEntry, most recent first
	byKey map[key]*list.Element
}

type seenEntry struct {
	k        key
	at       time.Time
	executed bool          // an attempt of this call started an execution
	gaveUp   time.Duration // the last attempt's client left after this long, unanswered
}

// mark records k and reports whether it was seen within the TTL and, if so,
// whether it ever got an execution and how long its last attempt's client
// waited before it gave up (0: it did not).
func (s *seenKeys) mark(k key, now time.Time) (seen, executed bool, gaveUp time.Duration) {
	if e, ok := s.byKey[k]; ok {
		ent := e.Value.(*seenEntry)
		fresh := now.Sub(ent.at) <= s.ttl
		ent.at = now
		s.lru.MoveToFront(e)
		gaveUp, ent.gaveUp = ent.gaveUp, 0
		if !fresh {
			ent.executed, gaveUp = false, 0
		}
		return fresh, ent.executed, gaveUp
	}
	s.insert(k, now)
	return false, false, 0
}

// executed records that call k got an execution (inserting k if it was
// forgotten meanwhile).
func (s *seenKeys) executed(k key, now time.Time) {
	e, ok := s.byKey[k]
	if !ok {
		e = s.insert(k, now)
	}
	e.Value.(*seenEntry).executed = true
}

func (s *seenKeys) insert(k key, now time.Time) *list.Element {
	e := s.lru.PushFront(&seenEntry{k: k, at: now})
	s.byKey[k] = e
	for s.lru.Len() > 0 {
		back := s.lru.Back()
		if s.lru.Len() <= s.max && now.Sub(back.Value.(*seenEntry).at) <= s.ttl {
			break
		}
		delete(s.byKey, s.lru.Remove(back).(*seenEntry).k)
	}
	return e
}
