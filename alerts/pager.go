package alerts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/state"
	"github.com/vigil-dev/vigil/util/backoff"
	"github.com/vigil-dev/vigil/util/faultlog"
	"github.com/vigil-dev/vigil/util/humanize"
	"github.com/vigil-dev/vigil/watchdog"
)

// stateSection is the pager's section of the state file.
const stateSection = "alerts"

// Options configures a Pager. Zero values take the defaults noted.
type Options struct {
	// Node names this host in every page (config "node").
	Node string
	// EngineURL is shown in pages; userinfo and query are stripped.
	EngineURL string
	// Plan is what vigil does about hung or down, one or two sentences
	// (see DescribeRecovery). Default: a generic drain-restart-restore.
	Plan string
	// Drain names what a drain takes out of rotation ("vllm/node1 at
	// HAProxy"); "" when there is no load balancer, and the pages then say
	// nothing of draining.
	Drain string
	// DryRun: vigil only says what it would do.
	DryRun bool
	// Outlook, if set, is the guard that would refuse a restart now
	// (recoverer.Recovery.Outlook), so a new incident's first page says what
	// will really happen. It must not block.
	Outlook func() *recovery.Refusal
	// Limiter: the admission limiter is in front of the engine.
	Limiter bool
	// Pool, if set, gives a one-line view of the pool ("pool: 3 members —
	// node1 SATURATED 40 waiting, ..."), shown in incident pages so one
	// saturated member is never mistaken for the whole pool.
	Pool func() string
	// UpdateEvery: evidence updates at most this often. Default 10m.
	UpdateEvery time.Duration
	// UnknownAfter: a change to unknown inside an open incident pages only
	// once it lasted this long, and so does a standing condition (see
	// Conditions).
	UnknownAfter time.Duration
	// OutboxSize bounds the pages held for delivery. Default 500.
	OutboxSize int
	// UpdateHead queues a rewrite of the head message with the latest
	// state after each change, update and resolve (Slack bot only).
	UpdateHead bool
	// Secrets are scrubbed from every page, log line and error (the Slack
	// token, the webhook URL, the engine API key).
	Secrets []configs.Secret

	// Store keeps the outbox and the threads across restarts. Default: a
	// memory store.
	Store *state.Store
	// Log receives the pager's own log lines. Default: discarded.
	Log *logrus.Entry
	// Registerer receives the pager's metrics; nil registers nothing.
	Registerer prometheus.Registerer

	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Sleep waits between delivery attempts, returning early with the
	// context's error. Default: a timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Jitter returns a number in [0, 1] that spreads the retry waits
	// (util/backoff); nil draws at random. Tests fix it.
	Jitter func() float64
	// RetryInitial and RetryMax bound the exponential backoff between
	// attempts (a 429's Retry-After takes precedence). Defaults 1s and
	// DefaultRetryMax.
	RetryInitial, RetryMax time.Duration
}

// OptionsFromConfig fills the Options that come from the config. The
// caller adds Store, Log and Registerer.
func OptionsFromConfig(cfg configs.Config) Options {
	return Options{
		Node:         cfg.Node,
		EngineURL:    cfg.Engine.URL,
		Plan:         DescribeRecovery(cfg),
		Drain:        drainTarget(cfg.LoadBalancer),
		DryRun:       cfg.Watchdog.DryRun,
		Limiter:      cfg.Admission.Enabled,
		UpdateEvery:  cfg.Alerts.UpdateEvery,
		UnknownAfter: cfg.Alerts.UnknownAfter,
		OutboxSize:   cfg.Alerts.OutboxSize,
		UpdateHead:   cfg.Alerts.Kind == "slack" && cfg.Alerts.Slack.UpdateHead,
		Secrets:      []configs.Secret{cfg.Alerts.Slack.Token, cfg.Alerts.Webhook.URL, cfg.Engine.APIKey},
	}
}

// DefaultRetryMax caps the wait between delivery attempts. The wait is
// also how late the first page arrives once Slack answers again, so it
// stays near a minute however long the outage was: a longer cap would
// save a few requests per hour and cost minutes of a hang's news.
const DefaultRetryMax = time.Minute

// persisted is the pager's section of the state file.
type persisted struct {
	// Seq is the last sequence number handed out.
	Seq    uint64    `json:"seq"`
	Outbox []Message `json:"outbox"`
	// Dropped counts pages dropped since the last note about it.
	Dropped int    `json:"dropped"`
	Thread  thread `json:"thread"`
	// Heads maps an incident to its head message's Slack ts.
	Heads map[string]headRef `json:"heads"`
	// Lost holds the heads that were given up (refused for good, or
	// dropped from the full outbox), by incident, until the next page of
	// the incident carries them to the operator.
	Lost map[string]lostHead `json:"lost_heads,omitempty"`
	// Conditions are the standing conditions seen, by topic.
	Conditions map[string]condition `json:"conditions,omitempty"`
}

// lostHead is what the operator must still read of a head never posted.
type lostHead struct {
	Title string    `json:"title,omitempty"`
	Text  string    `json:"text"`
	At    time.Time `json:"at"`
}

type headRef struct {
	TS string    `json:"ts"`
	At time.Time `json:"at"`
}

// Heads older than this, or beyond the newest maxHeads, are forgotten.
const (
	headTTL  = 7 * 24 * time.Hour
	maxHeads = 64
)

// Pager decides what to page (the policy) and delivers it (the outbox and
// its sender). It implements watchdog.Pager and recovery.Reporter. Observe,
// RecoveryStep and Notice only queue, in memory, and return at once; Run
// delivers and writes the outbox to the state file as it changes.
type Pager struct {
	notifier Notifier
	policy   policy
	conds    conditionPolicy
	render   renderer
	outlook  func() *recovery.Refusal
	dryRun   bool
	redact   redactor
	size     int
	updHead  bool
	store    *state.Store
	log      *logrus.Entry
	metrics  *metrics
	now      func() time.Time
	sleep    func(context.Context, time.Duration) error
	retryMin time.Duration
	retryMax time.Duration
	jitter   func() float64

	mu       sync.Mutex
	st       persisted
	inflight uint64        // Seq of the page being delivered (never dropped)
	changed  chan struct{} // closed and replaced whenever the outbox changes
	wake     chan struct{} // a page was queued
	dirty    chan struct{} // the persisted section changed

	saveMu  sync.Mutex // orders snapshots with their writes
	saveBad faultlog.Fault
	running atomic.Bool
	sent    atomic.Uint64 // pages delivered since start, for the digest
}

var (
	_ watchdog.Pager    = (*Pager)(nil)
	_ recovery.Reporter = (*Pager)(nil)
)

// NewPager returns a Pager delivering through n, with the outbox and
// threads restored from o.Store.
func NewPager(n Notifier, o Options) (*Pager, error) {
	if n == nil {
		return nil, errors.New("alerts: no notifier")
	}
	if o.Node == "" {
		o.Node = "vigil"
	}
	if o.UpdateEvery <= 0 {
		o.UpdateEvery = 10 * time.Minute
	}
	if o.OutboxSize <= 0 {
		o.OutboxSize = 500
	}
	if o.Plan == "" {
		o.Plan = "Will drain at the load balancer, restart the engine, restore traffic gradually."
	}
	if o.Store == nil {
		o.Store = state.Memory()
	}
	if o.Log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		o.Log = logrus.NewEntry(l)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sleep == nil {
		o.Sleep = sleepCtx
	}
	if o.RetryInitial <= 0 {
		o.RetryInitial = time.Second
	}
	if o.RetryMax < o.RetryInitial {
		o.RetryMax = max(DefaultRetryMax, o.RetryInitial)
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	p := &Pager{
		notifier: n,
		policy:   policy{UpdateEvery: o.UpdateEvery, UnknownAfter: o.UnknownAfter},
		conds:    conditionPolicy{PersistFor: o.UnknownAfter},
		render: renderer{
			node:      o.Node,
			engineURL: displayURL(o.EngineURL),
			plan:      o.Plan,
			drain:     o.Drain,
			limiter:   o.Limiter,
			pool:      o.Pool,
		},
		outlook:  o.Outlook,
		dryRun:   o.DryRun,
		redact:   newRedactor(o.Secrets...),
		size:     o.OutboxSize,
		updHead:  o.UpdateHead,
		store:    o.Store,
		saveBad:  faultlog.Fault{Now: o.Now},
		log:      o.Log.WithField("component", "alerts"),
		metrics:  m,
		now:      o.Now,
		sleep:    o.Sleep,
		retryMin: o.RetryInitial,
		retryMax: o.RetryMax,
		jitter:   o.Jitter,
		changed:  make(chan struct{}),
		wake:     make(chan struct{}, 1),
		dirty:    make(chan struct{}, 1),
	}
	if _, err := o.Store.Load(stateSection, &p.st); err != nil {
		return nil, fmt.Errorf("alerts: restore outbox: %w", err)
	}
	if p.st.Heads == nil {
		p.st.Heads = map[string]headRef{}
	}
	if p.st.Lost == nil {
		p.st.Lost = map[string]lostHead{}
	}
	// A smaller outbox_size than last run: shed by the usual rule.
	for len(p.st.Outbox) > p.size {
		p.dropLocked(nil)
		p.markDirty()
	}
	p.metrics.queued.Set(float64(len(p.st.Outbox)))
	if n := len(p.st.Outbox); n > 0 {
		p.log.WithField("queued", n).Info("alerts: restored pages not yet delivered")
		p.wake <- struct{}{}
	}
	return p, nil
}

// Observe is told every verdict with its incident (nil when there is
// none) and queues whatever the paging policy says to page.
func (p *Pager) Observe(v watchdog.Verdict, inc *watchdog.Incident) {
	now := p.now()
	if v.At.IsZero() {
		v.At = now
	}
	// The outlook is read before p.mu: it takes the recovery's lock, and
	// the recovery holds that lock while it reports a step to this pager.
	var outlook *recovery.Refusal
	if p.outlook != nil && v.State.NeedsRecovery() {
		outlook = p.outlook()
	}
	p.mu.Lock()
	prev := p.st.Thread
	t, decisions := p.policy.observe(prev, v, inc, now)
	p.st.Thread = t
	var g *refusalNote
	if len(decisions) > 0 {
		g = p.refusalLocked(t, v, outlook)
	}
	for _, d := range decisions {
		var m Message
		head := Message{}
		switch d.Kind {
		case KindHead:
			m = p.render.head(v, inc, g)
		case KindChange:
			m = p.render.change(v, inc, d, g)
			head = p.render.head(v, inc, g)
		case KindUpdate:
			m = p.render.update(v, inc, now.Sub(t.SeenSince), g)
			head = p.render.head(v, inc, g)
		case KindResolve:
			m = p.render.resolve(v, inc, t, now)
			head = m
		}
		if d.Kind != KindResolve {
			p.st.Thread.Told = g
		}
		p.enqueueLocked(m)
		if p.updHead && head.Kind != "" {
			head.Incident = t.Incident
			p.enqueueLocked(p.render.headUpdate(head, now))
		}
	}
	if len(decisions) > 0 || !reflect.DeepEqual(prev, t) {
		p.markDirty()
	}
	p.mu.Unlock()
}

// refusalLocked is the guard refusing the restart, for a page about v: the
// refusal the recovery reported for this incident, else (for a new hung
// or down incident) the guard that would refuse now (outlook).
func (p *Pager) refusalLocked(t thread, v watchdog.Verdict, outlook *recovery.Refusal) *refusalNote {
	if !v.State.NeedsRecovery() {
		return nil
	}
	if t.Refused != nil {
		g := *t.Refused
		return &g
	}
	if outlook == nil || t.Restarting || !t.RecoveryFrom.IsZero() {
		return nil
	}
	// Without a load balancer a refusal always leaves the host serving,
	// as the recovery's refused step will say.
	// Nor does a state file vigil cannot write: it drains nothing it could
	// not remember.
	serving := p.render.drain == "" || outlook.Guard == recovery.GuardStateUnwritable
	return &refusalNote{Guard: outlook.Guard, Until: outlook.Until, Dry: p.dryRun, Serving: serving}
}

// RecoveryStep queues a thread reply for one recovery step.
func (p *Pager) RecoveryStep(s recovery.Step) {
	if s.At.IsZero() {
		s.At = p.now()
	}
	p.mu.Lock()
	t, page := p.policy.step(p.st.Thread, s)
	p.st.Thread = t
	if page {
		p.enqueueLocked(p.render.step(s))
		p.markDirty()
	}
	p.mu.Unlock()
}

// Conditions is told every cycle's standing conditions by topic (see
// watchdog.Conditioner) and pages those that have lasted, once per
// episode: in the open incident's thread when there is one, else on
// their own.
func (p *Pager) Conditions(at time.Time, current map[string]string, recovering bool) {
	now := p.now()
	if at.IsZero() {
		at = now
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.st.Thread
	open := ""
	if t.Incident != "" && t.Headed && !t.Resolved {
		open = t.Incident
	}
	prev := p.st.Conditions
	next, page := p.conds.observe(prev, at, current, open, recovering)
	p.st.Conditions = next
	for _, topic := range page {
		m := p.render.notice(topic, next[topic].Text, nil, now)
		m.Incident = open
		p.enqueueLocked(m)
	}
	if len(page) > 0 || !reflect.DeepEqual(prev, next) {
		p.markDirty()
	}
}

// Notice queues a standalone page outside any incident: an override
// starting, due or expired, the retry-storm alarm, the daily digest.
// topic names it ("override", "retry_storm", "digest", ...).
func (p *Pager) Notice(topic, text string, fields ...Field) {
	now := p.now()
	p.mu.Lock()
	p.enqueueLocked(p.render.notice(topic, text, fields, now))
	p.markDirty()
	p.mu.Unlock()
}

// Sent is how many pages were delivered since the Pager started.
func (p *Pager) Sent() uint64 { return p.sent.Load() }

// Queued is the number of pages waiting for delivery.
func (p *Pager) Queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.st.Outbox)
}

// enqueueLocked scrubs m and appends it to the outbox, making room by the
// drop rule when the outbox is full.
func (p *Pager) enqueueLocked(m Message) {
	m = p.redact.Message(m)
	if m.Kind == KindHeadUpdate {
		// Only the latest rewrite of a head matters.
		p.st.Outbox = slices.DeleteFunc(p.st.Outbox, func(q Message) bool {
			return q.Kind == KindHeadUpdate && q.Incident == m.Incident && q.Seq != p.inflight
		})
	}
	p.st.Seq++
	m.Seq = p.st.Seq
	if len(p.st.Outbox) >= p.size && p.dropLocked(&m) {
		p.notifyLocked()
		return
	}
	p.st.Outbox = append(p.st.Outbox, m)
	p.notifyLocked()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// dropLocked makes room for incoming (nil: just shed one page): the
// oldest page of the lowest tier goes, never the one being delivered. If
// incoming is of a lower tier than everything queued, it is the one
// dropped, and dropLocked reports true.
func (p *Pager) dropLocked(incoming *Message) bool {
	victim := -1
	for i, q := range p.st.Outbox {
		if q.Seq == p.inflight && p.inflight != 0 {
			continue
		}
		if victim < 0 || q.Kind.tier() < p.st.Outbox[victim].Kind.tier() {
			victim = i
		}
	}
	var gone Message
	dropNew := incoming != nil && (victim < 0 || p.st.Outbox[victim].Kind.tier() > incoming.Kind.tier())
	if dropNew {
		gone = *incoming
	} else if victim >= 0 {
		gone = p.st.Outbox[victim]
		p.st.Outbox = slices.Delete(p.st.Outbox, victim, victim+1)
	} else {
		return false
	}
	p.st.Dropped++
	p.metrics.dropped.Inc()
	p.metrics.failed.WithLabelValues(failOutboxFull).Inc()
	p.loseHeadLocked(gone)
	p.log.WithFields(logrus.Fields{
		"page":     string(gone.Kind),
		"incident": gone.Incident,
		"title":    pageTitle(gone),
		"dropped":  p.st.Dropped,
		"queued":   len(p.st.Outbox),
	}).Error("alerts: outbox full, dropped a page")
	return dropNew
}

// loseHeadLocked remembers a head that will never be posted, so that the
// incident's next page carries it: a thread's first page is what tells
// the operator what happened, and must not vanish with only a log line.
func (p *Pager) loseHeadLocked(m Message) {
	if m.Kind != KindHead || m.Incident == "" {
		return
	}
	if _, posted := p.st.Heads[m.Incident]; posted {
		return
	}
	p.st.Lost[m.Incident] = lostHead{Title: m.Title, Text: m.Text, At: m.At}
}

// carryLostHead puts a lost head's text in front of m, the first page of
// its incident that gets delivered. m is posted to the channel on its own
// (it has no thread to go to), and becomes the thread's head.
func carryLostHead(m Message, h lostHead) Message {
	intro := "First page of this incident (it could not be posted on its own, " + humanize.ClockUTC(h.At) + "): " + h.Text
	body := m.Body
	if body == "" {
		body = m.Text
	}
	m.Text = intro + "\n" + m.Text
	m.Body = intro + "\n\n" + body
	if m.Title == "" {
		m.Title = h.Title
	}
	return m
}

// pageTitle names a page in a log line: its title, else the start of its
// text.
func pageTitle(m Message) string {
	if m.Title != "" {
		return m.Title
	}
	return truncate(m.Text, 120)
}

// notifyLocked tells Flush the outbox changed.
func (p *Pager) notifyLocked() {
	p.metrics.queued.Set(float64(len(p.st.Outbox)))
	close(p.changed)
	p.changed = make(chan struct{})
}

// markDirty asks the saver to write the state file.
func (p *Pager) markDirty() {
	select {
	case p.dirty <- struct{}{}:
	default:
	}
}

// saver writes the state file whenever the pager's section changed, off
// the callers' goroutines (a write is an fsync; the watchdog loop must not
// wait for one), and once more when ctx ends.
func (p *Pager) saver(ctx context.Context) {
	for {
		select {
		case <-p.dirty:
			p.save()
		case <-ctx.Done():
			p.save()
			return
		}
	}
}

// save writes the pager's section of the state file. A failure is logged:
// the pages are still in memory and the next save retries.
func (p *Pager) save() {
	p.saveMu.Lock()
	defer p.saveMu.Unlock()
	p.mu.Lock()
	snap := p.st
	snap.Outbox = slices.Clone(p.st.Outbox)
	snap.Heads = make(map[string]headRef, len(p.st.Heads))
	for k, v := range p.st.Heads {
		snap.Heads[k] = v
	}
	snap.Lost = maps.Clone(p.st.Lost)
	snap.Conditions = maps.Clone(p.st.Conditions)
	p.mu.Unlock()
	if err := p.store.Save(stateSection, snap); err != nil {
		p.saveBad.Failed(p.log, logrus.WarnLevel, p.redact.Error(err), "alerts: cannot save the outbox to the state file")
		return
	}
	p.saveBad.OK(p.log, "alerts: outbox saved to the state file again")
}

// pending is the next page to deliver; note is the dropped count it
// reports when it is the dropped-pages note.
type pending struct {
	msg  Message
	note int
	// carries: msg carries its incident's lost head.
	carries bool
}

// next picks what to deliver: the note about dropped pages first, then
// the oldest page, with its thread's head ts filled in.
func (p *Pager) next() (pending, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.st.Dropped > 0 {
		return pending{msg: p.render.dropped(p.st.Dropped, p.size, p.now()), note: p.st.Dropped}, true
	}
	if len(p.st.Outbox) == 0 {
		return pending{}, false
	}
	m := p.st.Outbox[0]
	p.inflight = m.Seq
	if m.Incident != "" && m.Kind != KindHead {
		m.ThreadTS = p.st.Heads[m.Incident].TS
	}
	if lost, ok := p.st.Lost[m.Incident]; ok && m.Reply() && m.ThreadTS == "" {
		return pending{msg: carryLostHead(m, lost), carries: true}, true
	}
	return pending{msg: m}, true
}

// done settles a page after its last attempt: delivered (ts is the posted
// message's, for a head) or given up.
func (p *Pager) done(pg pending, ts string, delivered bool) {
	now := p.now()
	p.mu.Lock()
	if pg.note > 0 {
		p.st.Dropped = max(0, p.st.Dropped-pg.note)
	} else {
		p.st.Outbox = slices.DeleteFunc(p.st.Outbox, func(q Message) bool { return q.Seq == pg.msg.Seq })
		switch {
		case delivered && (pg.msg.Kind == KindHead || pg.carries):
			if ts != "" {
				p.st.Heads[pg.msg.Incident] = headRef{TS: ts, At: now}
				p.pruneHeadsLocked(now)
			}
			delete(p.st.Lost, pg.msg.Incident)
		case !delivered:
			p.loseHeadLocked(pg.msg)
		}
	}
	p.inflight = 0
	if delivered {
		p.metrics.sent.WithLabelValues(string(pg.msg.Kind)).Inc()
		p.sent.Add(1)
	}
	p.notifyLocked()
	p.markDirty()
	p.mu.Unlock()
}

func (p *Pager) pruneHeadsLocked(now time.Time) {
	for id, h := range p.st.Heads {
		if now.Sub(h.At) > headTTL {
			delete(p.st.Heads, id)
		}
	}
	for id, h := range p.st.Lost {
		if now.Sub(h.At) > headTTL {
			delete(p.st.Lost, id)
		}
	}
	for len(p.st.Heads) > maxHeads {
		oldest := ""
		for id, h := range p.st.Heads {
			if oldest == "" || h.At.Before(p.st.Heads[oldest].At) {
				oldest = id
			}
		}
		delete(p.st.Heads, oldest)
	}
}

// Run delivers queued pages in order until ctx ends, retrying failures
// with bounded exponential backoff and honouring Slack's Retry-After. A
// page Slack refuses for good (bad token, no such channel) is logged and
// skipped: retrying cannot help, and the pages behind it must not wait.
func (p *Pager) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("alerts: pager already running")
	}
	defer p.running.Store(false)
	saverCtx, stopSaver := context.WithCancel(context.Background())
	saved := make(chan struct{})
	go func() {
		defer close(saved)
		p.saver(saverCtx)
	}()
	defer func() {
		p.mu.Lock()
		p.inflight = 0
		p.mu.Unlock()
		stopSaver()
		<-saved // the last word goes to disk before Run returns
	}()
	// After a Slack outage every vigil of the fleet retries: jitter keeps
	// them from doing it in lockstep.
	policy := backoff.Policy{Min: p.retryMin, Max: p.retryMax, Rand: p.jitter}
	failures := 0
	attempt := 0
	for {
		pg, ok := p.next()
		if !ok {
			select {
			case <-ctx.Done():
				return nil
			case <-p.wake:
				continue
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		m := pg.msg
		if late := p.now().Sub(m.At); late > 0 {
			m.Delay = late
		}
		attempt++
		ts, retry, err := p.deliver(ctx, m)
		if err == nil {
			if attempt > 1 {
				p.log.WithFields(logrus.Fields{"page": string(m.Kind), "attempts": attempt}).Info("alerts: page delivered after retries")
			}
			p.done(pg, ts, true)
			failures, attempt = 0, 0
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		err = p.redact.Error(err)
		p.metrics.errors.WithLabelValues(fmt.Sprint(retry)).Inc()
		entry := p.log.WithError(err).WithFields(logrus.Fields{
			"page":     string(m.Kind),
			"incident": m.Incident,
			"attempts": attempt,
		})
		if !retry {
			p.metrics.failed.WithLabelValues(failRejected).Inc()
			entry.WithField("title", pageTitle(m)).Error("alerts: page not delivered, and retrying cannot help; skipping it")
			p.done(pg, "", false)
			failures, attempt = 0, 0
			continue
		}
		var wait time.Duration
		if ra := retryAfter(err); ra > 0 {
			wait = ra // Slack said when: no jitter, no doubling
		} else {
			failures++
			wait = policy.Delay(failures)
		}
		// Log the first failure and then at powers of two: an outage of
		// hours must not flood the log.
		if attempt&(attempt-1) == 0 {
			entry.WithField("retry_in_seconds", wait.Round(time.Second).Seconds()).Warn("alerts: page not delivered; will retry")
		}
		if err := p.sleep(ctx, wait); err != nil {
			return nil
		}
	}
}

// deliver hands one page to the notifier, asking a threading notifier for
// the posted message's ts.
func (p *Pager) deliver(ctx context.Context, m Message) (string, bool, error) {
	if t, ok := p.notifier.(Threader); ok {
		return t.Post(ctx, m)
	}
	retry, err := p.notifier.Notify(ctx, m)
	return "", retry, err
}

// Flush waits until every queued page (and the note about dropped ones)
// has been delivered or given up, for tests and shutdown. Run must be
// running.
func (p *Pager) Flush(ctx context.Context) error {
	for {
		p.mu.Lock()
		n, dropped, ch := len(p.st.Outbox), p.st.Dropped, p.changed
		p.mu.Unlock()
		if n == 0 && dropped == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("alerts: flush: %d pages still queued: %w", n, ctx.Err())
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
