package watchdog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/probes"
	"github.com/vigil-dev/vigil/state"
	"github.com/vigil-dev/vigil/util/faultlog"
	"github.com/vigil-dev/vigil/util/humanize"
)

// Probes is what one cycle observes. *probes.Client implements it; tests
// fake it. The completion probe is asynchronous: PollCompletion never
// blocks, StartCompletion starts one unless one is outstanding.
type Probes interface {
	Models(ctx context.Context) probes.ModelsObservation
	Health(ctx context.Context) probes.Observation
	Metrics(ctx context.Context) probes.MetricsObservation
	StartCompletion(model string) bool
	PollCompletion() probes.CompletionStatus
}

// Sleeper is the optional part of Probes that asks the engine whether it
// was put to sleep on purpose (vLLM's sleep mode). *probes.Client
// implements it; known is false when the engine does not say.
type Sleeper interface {
	Sleeping(ctx context.Context) (asleep, known bool)
}

var _ Sleeper = (*probes.Client)(nil)

// Options configure a Watchdog. Engine and Watchdog are required; every
// collaborator may be nil.
type Options struct {
	Engine   configs.Engine
	Watchdog configs.Watchdog
	// UnknownAfter: an unknown verdict opens an incident only once it has
	// lasted this long (alerts.unknown_after).
	UnknownAfter time.Duration
	// CalmFor: an incident that needed no recovery (saturated, unknown,
	// misconfigured) resolves once verdicts have been healthy this long
	// (alerts.resolve_after); zero resolves it on the first healthy one.
	CalmFor time.Duration
	// Node prefixes incident IDs (the config's node name).
	Node string

	// Probes observes the engine; nil builds a probes.Client from Engine
	// and Watchdog (closed when Run returns).
	Probes Probes
	// Reader reads the engine's /metrics for the Client built when Probes
	// is nil: the daemon shares one with the admission limiter. nil builds
	// one from Engine.
	Reader    *probes.Reader
	Pager     Pager
	Recoverer Recoverer
	Limiter   LimiterControl
	// Store persists the open incident and the sample history (section
	// "watchdog"); nil keeps them in memory only.
	Store *state.Store
	Log   *logrus.Entry
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Paused, when set, is how much of [a, b] (Now's time) vigil's own
	// process was not running: the process-wide pause meter's Paused
	// (util/pausemeter, on the same clock). The stall HUNG is judged on is
	// net of it, so vigil starved of CPU never restarts the engine for
	// its own silence. nil: no pauses.
	Paused func(a, b time.Time) time.Duration
	// Registerer receives vigil_watchdog_* metrics; nil registers none.
	Registerer prometheus.Registerer
	// OnCycle is called at the end of every cycle with its verdict, from
	// the loop itself: the place for systemd's WATCHDOG=1, so a wedged
	// loop stops the heartbeat.
	OnCycle func(Verdict)
	// EngineStarted is when the engine was last started, if known (e.g.
	// from Docker), for the startup-grace rule. When zero and the engine
	// has never been seen ready, vigil assumes it started with vigil.
	EngineStarted time.Time
	// MaxInFlight is the admission limiter's cap, shown beside the
	// Little's-law estimate by Diagnose and Capacity (0: not shown).
	MaxInFlight int
	// LimiterLoad, when set, reads the admission limiter's counts each
	// cycle, so saturation held off by the limiter is seen. It must not
	// block.
	LimiterLoad func() LimiterLoad
	// LimiterSource, for Diagnose only, reads the counts of a vigil's
	// limiter running in another process in front of the engine (`vigil
	// diagnose` beside `vigil run`): what LimiterLoad is to the daemon.
	LimiterSource LimiterSource
	// Notice, when set, is told standalone events that are not verdicts:
	// the retry-storm alarm starting and ending ("retry_storm"). It must
	// not block.
	Notice func(kind, text string)
	// Conditions, when set, is told every cycle's standing conditions
	// (see Conditioner).
	Conditions Conditioner
}

// Conditioner is told, every cycle, the standing conditions that are no
// reason to restart but worth a human's look, by topic: "engine_odd" (an
// endpoint misbehaves on an engine that serves), "probe_failing" (the
// probe fails for a reason other than load), "metrics_missing"
// (configured metrics absent from /metrics). A topic absent from current
// is a condition cleared. One flaky scrape raises and clears them within
// a cycle, so the Conditioner (the pager) decides which have lasted long
// enough to page. recovering: vigil's own recovery is under way, and
// what the probes see is partly vigil's doing (a refused /v1/models
// while it restarts the engine). It must not block.
type Conditioner interface {
	Conditions(at time.Time, current map[string]string, recovering bool)
}

// StateSection is the state-file section the watchdog owns.
const StateSection = "watchdog"

// maxHistory bounds the persisted history whatever the stall length.
const maxHistory = 1000

// persisted is the watchdog's state-file section.
type persisted struct {
	tracker
	LastReady time.Time `json:"last_ready,omitzero"`
	History   []Sample  `json:"history"`
	// Work is this engine's pace as learned (hang_after: auto).
	Work workLog `json:"work"`
	// Held is the auto window held while a stall is timed: it never
	// shrinks under a stall, vigil's own restart included.
	Held time.Duration `json:"held_window,omitempty"`
}

// Watchdog is the cycle loop: sample, classify, keep the incident, tell
// the pager and the limiter, ask for recovery. Create it with New.
type Watchdog struct {
	opts      Options
	base      Params // thresholds guarded by mu
	interval  time.Duration
	log       *logrus.Entry
	now       func() time.Time
	probes    Probes
	ownProbes *probes.Client
	store     *state.Store
	metrics   *metrics
	started   time.Time

	cycleMu sync.Mutex // one cycle at a time

	mu        sync.Mutex // guards the fields below
	history   []Sample
	lastReady time.Time
	tracker   tracker
	current   Verdict
	cycled    bool // a cycle has run

	// Used by the cycle only (under cycleMu).
	probeFailing  string         // the probe failure last told (noticeOdd)
	odd           string         // the oddities last told (noticeOdd)
	missing       map[string]int // consecutive scrapes each name was missing from
	lastCompleted time.Time
	saveFault     faultlog.Fault // the state file's writes failing
	asked         string         // incident+state recovery was last asked for
	storm         bool
	work          workLog       // guarded by mu
	held          time.Duration // guarded by mu
	// fast: the last readable scrape showed work pending (or a stall is
	// timed): cycle every fastCycle. Guarded by mu.
	fast bool
	// savedAt is when the state was last persisted (cycle only).
	savedAt time.Time
}

// New builds a Watchdog and restores its persisted state: an incident
// open when vigil stopped stays the same incident, and the history keeps
// the "frozen since" clock running across vigil's own restart.
func New(opts Options) (*Watchdog, error) {
	if opts.Watchdog.Interval <= 0 {
		return nil, errors.New("watchdog: interval must be > 0")
	}
	w := &Watchdog{
		opts:     opts,
		base:     ParamsFrom(opts.Watchdog),
		interval: opts.Watchdog.Interval,
		log:      opts.Log,
		now:      opts.Now,
		probes:   opts.Probes,
		store:    opts.Store,
	}
	if w.now == nil {
		w.now = time.Now
	}
	w.saveFault.Now = w.now
	if w.log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		w.log = logrus.NewEntry(l)
	}
	if w.store == nil {
		w.store = state.Memory()
	}
	var err error
	if w.metrics, err = newMetrics(opts.Registerer); err != nil {
		return nil, err
	}
	var p persisted
	found, err := w.store.Load(StateSection, &p)
	if err != nil {
		return nil, fmt.Errorf("watchdog: restore state: %w", err)
	}
	if found {
		w.tracker, w.lastReady, w.history = p.tracker, p.LastReady, p.History
		w.work, w.held = p.Work, p.Held
		if w.tracker.Open != nil {
			w.log.WithFields(logrus.Fields{"incident": w.tracker.Open.ID, "state": w.tracker.Open.State}).
				Info("watchdog: resuming the open incident")
		}
	}
	if w.probes == nil {
		pc := probes.FromConfig(opts.Engine, opts.Watchdog)
		pc.Now, pc.Reader = w.now, opts.Reader
		w.ownProbes = probes.NewClient(pc)
		w.probes = w.ownProbes
	}
	w.started = w.now()
	w.current = Verdict{State: StateUnknown, Reason: "UNKNOWN: no sample yet", At: w.started}
	return w, nil
}

// fastCycle is the cycle while work is pending: the scrape and the probe
// cost the engine almost nothing, and a stall is only timed from the
// first sample that sees it, so a cycle as long as the window's floor
// would add up to a floor to every detection.
func fastCycle(interval time.Duration) time.Duration { return interval / 5 }

// Run samples until ctx is done, then returns nil: every interval, or
// every fastCycle while the last scrape's gauges showed work.
func (w *Watchdog) Run(ctx context.Context) error {
	if w.ownProbes != nil {
		defer w.ownProbes.Close()
	}
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		start := time.Now()
		w.Cycle(ctx)
		// The next cycle is due a cycle after this one began (as a
		// ticker would keep it), at once if this one ran late.
		t.Reset(max(w.cycleLen()-time.Since(start), 0))
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// cycleLen is the time from one cycle's start to the next's.
func (w *Watchdog) cycleLen() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fast {
		return fastCycle(w.interval)
	}
	return w.interval
}

// Current returns the last verdict and the open incident (nil if none),
// for /status.
func (w *Watchdog) Current() (Verdict, *Incident) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tracker.Open == nil {
		return w.current, nil
	}
	c := *w.tracker.Open
	return w.current, &c
}

// LastIncident is the last incident that resolved (nil before the first),
// kept across vigil's restarts with the rest of the state.
func (w *Watchdog) LastIncident() *Incident {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tracker.Last == nil {
		return nil
	}
	c := *w.tracker.Last
	return &c
}

// Cycle runs one sampling cycle and returns its verdict. Run calls it every
// interval; calls are serialized.
func (w *Watchdog) Cycle(ctx context.Context) Verdict {
	w.cycleMu.Lock()
	defer w.cycleMu.Unlock()
	now := w.now()
	s := w.sample(ctx, now)
	if ctx.Err() != nil {
		// Shutting down mid-sample: the probes saw our own cancellation,
		// not the engine. Record nothing.
		v, _ := w.Current()
		return v
	}
	w.observeSample(&s)
	o := w.judge(s, now)

	// The next completion probe runs while we wait for the next cycle.
	model := w.opts.Engine.Model
	if model == "" {
		model = s.Models.First()
	}
	w.probes.StartCompletion(model)

	if o.save {
		w.persist(o.snapshot)
		w.savedAt = now
	}
	w.tell(ctx, now, o)
	return o.v
}

// sample takes the cycle's sample, with the limiter's counts read on both
// sides of the scrape: calls that finish or start while it runs are in
// the engine's gauges and in one of the two readings, so work the limiter
// sent is never taken for work sent around it.
func (w *Watchdog) sample(ctx context.Context, now time.Time) Sample {
	if w.opts.LimiterLoad == nil {
		return sampleOnce(ctx, w.probes, now, w.opts.Engine.RequestTimeout)
	}
	before := w.opts.LimiterLoad()
	s := sampleOnce(ctx, w.probes, now, w.opts.Engine.RequestTimeout)
	l := bracket(before, w.opts.LimiterLoad())
	s.Limiter = &l
	return s
}

// bracket is the limiter's reading for a sample taken between two
// readings: the later counts, with the calls in flight at either.
func bracket(before, after LimiterLoad) LimiterLoad {
	after.InFlight = max(after.InFlight, before.InFlight)
	after.LongestPrompt = max(after.LongestPrompt, before.LongestPrompt)
	return after
}

// cycleOutcome is what one cycle's judgement leaves for the rest of the cycle
// to tell and keep.
type cycleOutcome struct {
	v, prev                 Verdict
	inc                     *Incident
	first, opened, resolved bool
	// busy: a recovery is under way.
	busy bool
	// snapshot is the state to persist, when save.
	snapshot persisted
	save     bool
}

// judge adds s to the history, classifies it, and moves the incident on,
// all under mu: the history, the pace learned, the window held, the
// cycle's speed and the verdict change together.
func (w *Watchdog) judge(s Sample, now time.Time) cycleOutcome {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.history = append(w.history, s)
	if s.Models.OK() {
		w.lastReady = now
	}
	// One read of the history for what the loop keeps beside Classify:
	// the work log, the window held under a stall, the trim's anchor.
	whole := wholeScrapes(w.history)
	sc := scanHistory(whole, now)
	w.work.learn(whole, now)
	params := w.params(now)
	wasFast := w.fast
	// A tenth of the cycle that led here (see Params.Tolerance).
	if wasFast {
		params.Tolerance = fastCycle(w.interval) / 10
	} else {
		params.Tolerance = w.interval / 10
	}
	w.window(&params, whole, &sc)
	v := Classify(w.history, params, now)
	// Fast cycles only on a readable scrape whose gauges show work, until
	// the verdict is hung: an engine that refuses or times out is judged
	// down or wedged over samples an interval apart, as before; vigil's
	// own probe alone is no work to watch closely (on an idle engine it
	// would only sample its own probe in flight); and a hang already
	// found needs no faster look (nor a history of a thousand one-second
	// samples that would push its "frozen since" out).
	w.fast = sc.last == sc.lastReadable && sc.last.Metrics.Metrics.Waiting+sc.last.Metrics.Metrics.Running > 0 && v.State != StateHung
	w.history = trim(w.history, &sc, now, w.retention())
	o := cycleOutcome{busy: w.opts.Recoverer != nil && w.opts.Recoverer.Busy()}
	v.Recovering = o.busy
	if o.busy {
		// An endpoint that misbehaves while vigil drains or restarts the
		// engine is vigil's doing (the old process it stopped): no oddity
		// of the engine's, on a page, /status or in the log.
		v.Evidence.Odd = nil
	}
	o.inc, o.opened, o.resolved = w.tracker.observe(v, o.busy, w.opts.UnknownAfter, w.opts.CalmFor, w.opts.Node)
	o.v, o.prev, o.first = v, w.current, !w.cycled
	w.current, w.cycled = v, true
	o.snapshot = persisted{tracker: w.tracker, LastReady: w.lastReady, History: w.history, Work: w.work, Held: w.held}
	// Fast cycles persist at most once an interval: the state file is
	// what a restart of vigil resumes from, and an interval's samples
	// more or less change nothing of it; an incident opening or resolving
	// is saved at once.
	o.save = !wasFast || o.first || o.opened || o.resolved || !now.Before(w.savedAt.Add(w.interval))
	return o
}

// tell passes the cycle's verdict on: metrics, the log, the retry-storm
// alarm, the pager, the conditions, the limiter, the recovery, and last
// the loop's heartbeat.
func (w *Watchdog) tell(ctx context.Context, now time.Time, o cycleOutcome) {
	v, inc := o.v, o.inc
	w.metrics.verdict(v, o.opened)
	w.logVerdict(o.prev, v, inc, o.first, o.opened, o.resolved)
	if w.opts.Watchdog.RetryStorm.Enabled {
		w.checkStorm()
	}
	conds := w.conditions(v)

	if w.opts.Pager != nil {
		w.opts.Pager.Observe(v, inc)
	}
	if w.opts.Conditions != nil {
		// After Observe: a condition that pages goes to the incident's
		// thread the verdict just opened or kept.
		w.opts.Conditions.Conditions(now, conds, o.busy)
	}
	if w.opts.Limiter != nil {
		w.opts.Limiter.SetSaturated(saturatedForLimiter(v, inc))
	}
	if v.State.NeedsRecovery() && inc.Open() && w.opts.Recoverer != nil && !o.busy {
		w.recover(ctx, *inc, v)
	}
	if w.opts.OnCycle != nil {
		w.opts.OnCycle(v)
	}
}

// Thresholds returns the thresholds in force.
func (w *Watchdog) Thresholds() Thresholds {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.base.Thresholds
}

// SetThresholds changes the thresholds from the next cycle on (a SIGHUP
// reload, an override). The caller validates them.
func (w *Watchdog) SetThresholds(t Thresholds) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t != w.base.Thresholds {
		w.log.WithFields(logrus.Fields{
			"hang_after_seconds": t.HangAfter.Seconds(), "saturated_waiting": t.SaturatedWaiting,
			"probe_slo_seconds": t.ProbeSLO.Seconds(), "down_after": t.DownAfter,
			"startup_grace_seconds": t.StartupGrace.Seconds(),
		}).Info("watchdog: thresholds changed")
	}
	w.base.Thresholds = t
}

// Capacity is the engine's measured capacity over the recent samples, for
// /status: Little's law beside the limiter's cap, the rates, and the
// retry-storm check.
type Capacity struct {
	Window            time.Duration `json:"-"`
	InFlight          float64       `json:"-"`
	InFlightKnown     bool          `json:"in_flight_known"`
	MaxInFlight       int           `json:"max_in_flight,omitempty"`
	CompletionsPerSec float64       `json:"-"`
	CompletionsKnown  bool          `json:"completions_known"`
	// CompletionsThroughVigil: the rate is the calls vigil's limiter saw
	// answered (the engine counts none).
	CompletionsThroughVigil bool            `json:"completions_through_vigil,omitempty"`
	TokensPerSec            float64         `json:"tokens_per_second"`
	RetryStorm              RetryStormCheck `json:"retry_storm"`
	// Load is Little's law with the recommended cap (nil without
	// completions in the window).
	Load *Load `json:"load,omitempty"`
}

// MarshalJSON writes the window in seconds, and in_flight and
// completions_per_second only when they are known (llama.cpp counts no
// finished requests: a 0 would read as an engine completing nothing).
func (c Capacity) MarshalJSON() ([]byte, error) {
	type plain Capacity
	return json.Marshal(struct {
		plain
		InFlight          *float64 `json:"in_flight,omitempty"`
		CompletionsPerSec *float64 `json:"completions_per_second,omitempty"`
		Window            float64  `json:"window_seconds"`
	}{plain(c), knownOnly(c.InFlight, c.InFlightKnown), knownOnly(c.CompletionsPerSec, c.CompletionsKnown), c.Window.Seconds()})
}

// capacityWindow is the span Capacity measures over.
const capacityWindow = 5 * time.Minute

// Capacity measures over the last five minutes of samples (or the
// retry-storm window when that is set).
func (w *Watchdog) Capacity() Capacity {
	window := capacityWindow
	if rs := w.opts.Watchdog.RetryStorm; rs.Window > 0 {
		window = rs.Window
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	c := Capacity{MaxInFlight: w.opts.MaxInFlight}
	if len(w.history) == 0 {
		return c
	}
	last := w.history[len(w.history)-1].At
	p := w.base
	p.RateWindow = window
	ev := Classify(w.history, p, last).Evidence
	c.Window, c.CompletionsPerSec, c.CompletionsKnown, c.TokensPerSec = ev.Window, ev.CompletionsPerSec, ev.CompletionsKnown, ev.TokensPerSec
	c.CompletionsThroughVigil = ev.CompletionsThroughVigil
	if l, ok := LoadOver(w.history, window); ok {
		c.InFlight, c.InFlightKnown, c.Load = l.InFlight, true, &l
	}
	rs := w.opts.Watchdog.RetryStorm
	rs.Window = window
	c.RetryStorm = CheckRetryStorm(w.history, rs)
	return c
}

// params completes the thresholds with the guard state; call with mu held.
func (w *Watchdog) params(now time.Time) Params {
	p := w.base
	p.Paused = w.opts.Paused
	p.LastReady = w.lastReady
	p.LastStart = w.opts.EngineStarted
	if w.opts.Recoverer != nil {
		if t := w.opts.Recoverer.LastRestart(); t.After(p.LastStart) {
			p.LastStart = t
		}
	}
	if w.tracker.Open != nil {
		p.ProofSince = w.tracker.ProofSince
	}
	// Never seen ready, by this vigil or a previous one: the engine most
	// likely booted with us, and restarting it mid-load would only start
	// the load again.
	if p.LastStart.IsZero() && w.lastReady.IsZero() {
		p.LastStart = w.started
	}
	return p
}

// window puts the hang_after in force into p: the fixed one, or the
// automatic window, which never shrinks while a stall is being timed (a
// stall judged against a window that shrank under it would be called hung
// by a rule it never met). Call with mu held.
// whole is the history as wholeScrapes reads it, sc its scan.
func (w *Watchdog) window(p *Params, whole []Sample, sc *scan) {
	if p.HangAfter > 0 {
		w.metrics.hangAfter.Set(p.HangAfter.Seconds())
		return
	}
	win := autoWindow(whole, &w.work, p.HangAfterMin, p.HangAfterMax)
	if stalling := sc.stall > 0 || sc.decode.Stall > 0 || sc.wedge.For > 0; stalling && w.held > win.D {
		win.Why = fmt.Sprintf("hang_after %s (auto, held while the stall is timed; now %s)", humanize.Duration(w.held), win.Why)
		win.D = w.held
	}
	w.held = win.D
	p.HangAfter, p.WindowWhy, p.WindowFrom = win.D, win.Why, win.From
	w.metrics.hangAfter.Set(win.D.Seconds())
}

// retention is how much history the classifier and Capacity need: twice
// hang_after, the capacity window, and a few intervals (trim keeps more
// while a stall is longer). Call with mu held.
func (w *Watchdog) retention() time.Duration {
	return max(2*w.base.Ceiling(), capacityWindow, w.opts.Watchdog.RetryStorm.Window) + 4*w.interval
}

// trim drops samples older than retention, but never the sample at which
// the counters last moved (sc is h's scan): the "frozen since" clock is
// anchored there.
func trim(h []Sample, sc *scan, now time.Time, retention time.Duration) []Sample {
	cut := 0
	for cut < len(h)-2 && h[cut].At.Before(now.Add(-retention)) {
		cut++
	}
	if sc.lastReadable != nil && sc.lastMoveIdx < cut {
		cut = sc.lastMoveIdx
	}
	cut = max(cut, len(h)-maxHistory)
	if cut == 0 {
		return h
	}
	return append([]Sample(nil), h[cut:]...)
}

// sampleOnce takes one sample: the synchronous probes in parallel (and
// the sleep-mode query when p is a Sleeper),
// each bounded by timeout, and the completion probe's current status.
func sampleOnce(ctx context.Context, p Probes, now time.Time, timeout time.Duration) Sample {
	s := Sample{At: now}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout+time.Second)
		defer cancel()
	}
	var wg sync.WaitGroup
	if sl, ok := p.(Sleeper); ok {
		wg.Add(1)
		go func() { defer wg.Done(); s.Asleep, _ = sl.Sleeping(ctx) }()
	}
	wg.Add(3)
	go func() { defer wg.Done(); s.Models = p.Models(ctx) }()
	go func() { defer wg.Done(); s.Health = p.Health(ctx) }()
	go func() { defer wg.Done(); s.Metrics = p.Metrics(ctx) }()
	s.Probe = p.PollCompletion()
	wg.Wait()
	return s
}

// observeSample feeds vigil's own metrics and logs missing metrics once.
func (w *Watchdog) observeSample(s *Sample) {
	w.metrics.probe("models", s.Models.Observation)
	w.metrics.probe("health", s.Health)
	w.metrics.probe("metrics", s.Metrics.Observation)
	if !s.Metrics.Readable() {
		w.metrics.scrapeErrors.Inc()
	}
	if st := s.Probe; st.State != probes.ProbeOutstanding && st.State != probes.ProbeIdle && !st.Started.Equal(w.lastCompleted) {
		w.lastCompleted = st.Started
		w.metrics.probe("completion", st.Observation)
	}
	// A missing metric is logged once it has been missing from
	// acceptShapeAfter scrapes in a row, and is a standing condition from
	// then on (conditions): a body cut short drops families from one
	// scrape, which is the proxy's fault, not the config's. A scrape that
	// failed to parse says nothing about names.
	if s.Metrics.Readable() || len(s.Metrics.Missing) > 0 {
		if w.missing == nil {
			w.missing = map[string]int{}
		}
		var tell []string
		for name := range w.missing {
			if !slices.Contains(s.Metrics.Missing, name) {
				delete(w.missing, name)
			}
		}
		for _, name := range s.Metrics.Missing {
			w.missing[name]++
			if w.missing[name] == acceptShapeAfter {
				tell = append(tell, name)
			}
		}
		if len(tell) > 0 {
			missing := strings.Join(tell, ", ")
			w.log.WithField("missing", missing).
				Warn("watchdog: engine metrics missing from /metrics (check engine.metrics); a missing heartbeat is ignored, a missing waiting, running or progress metric leaves the verdict unknown")
		}
	}
}

func (w *Watchdog) persist(p persisted) {
	// Logged once, then as a reminder: a state file that cannot be
	// written fails every cycle, and each error names another temp file.
	if err := w.store.Save(StateSection, p); err != nil {
		w.saveFault.Failed(w.log, logrus.ErrorLevel, err, "watchdog: cannot persist state; an incident may reopen after a vigil restart")
		return
	}
	w.saveFault.OK(w.log, "watchdog: state persisted again")
}

// action says what vigil does about a state, for the log.
func (w *Watchdog) action(s State) string {
	return actionFor(s, w.opts.Recoverer != nil, w.opts.Watchdog.DryRun)
}

func actionFor(s State, canRecover, dryRun bool) string {
	switch s {
	case StateHung, StateDown:
		if !canRecover {
			return "page; no recoverer configured"
		}
		if dryRun {
			return "dry-run: would drain and restart"
		}
		return "drain and restart"
	case StateSaturated:
		return "page; tell the limiter; never restart"
	case StateMisconfigured:
		return "page once; never restart"
	case StateUnknown:
		return "page if it lasts; never restart"
	case StateHealthy:
		return "resolve any open incident"
	}
	return "wait"
}

// logVerdict logs the first verdict and every change at info or warn, and
// steady states at debug.
func (w *Watchdog) logVerdict(prev, v Verdict, inc *Incident, first, opened, resolved bool) {
	ev := v.Evidence
	fields := logrus.Fields{
		"state":           string(v.State),
		"stalled_seconds": round1(ev.Stalled.Seconds()),
		"probe":           ev.Probe,
	}
	if ev.Paused > 0 {
		fields["vigil_paused_seconds"] = round1(ev.Paused.Seconds())
	}
	// Figures nobody read (an unreadable /metrics) are left out, not 0.
	if ev.QueueKnown() {
		fields["waiting"], fields["running"] = ev.Waiting, ev.Running
	}
	if ev.RatesKnown() {
		fields["tokens_per_second"], fields["since_progress_seconds"] = round1(ev.TokensPerSec), round1(ev.SinceProgress.Seconds())
	}
	l := w.log.WithFields(fields)
	if inc != nil {
		l = l.WithField("incident", inc.ID)
	}
	if prev.State == v.State && !first && !opened && !resolved {
		l.Debug(v.Reason)
		return
	}
	l = l.WithField("action", w.action(v.State))
	if !first {
		l = l.WithField("previous_state", string(prev.State))
	}
	switch {
	case opened:
		l.Warn("incident opened: " + v.Reason)
	case resolved:
		l.Info("incident resolved: " + v.Reason)
	case first && (v.State == StateHealthy || v.State == StateLoading):
		l.Info("first verdict: " + v.Reason)
	case v.State == StateHealthy || v.State == StateLoading:
		l.Info(v.Reason)
	default:
		l.Warn(v.Reason)
	}
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

func (w *Watchdog) recover(ctx context.Context, inc Incident, v Verdict) {
	key := inc.ID + "/" + string(v.State)
	l := w.log.WithFields(logrus.Fields{"incident": inc.ID, "state": string(v.State)})
	switch {
	case w.opts.Watchdog.DryRun && key != w.asked:
		l.Warn("dry-run: asking the recoverer, which only logs and pages what it would do")
	case key != w.asked:
		l.Warn("asking for recovery: drain, restart, wait ready, restore")
	default:
		l.Debug("asking for recovery again")
	}
	w.asked = key
	w.opts.Recoverer.Recover(ctx, inc, v)
}

// checkStorm logs the retry-storm alarm when it starts and ends.
func (w *Watchdog) checkStorm() {
	w.mu.Lock()
	c := CheckRetryStorm(w.history, w.opts.Watchdog.RetryStorm)
	w.mu.Unlock()
	if c.Alarm == w.storm {
		return
	}
	w.storm = c.Alarm
	l := w.log.WithFields(logrus.Fields{
		"prompt_tokens_delta": c.PromptTokens, "prefix_cache_queries_delta": c.PrefixCacheQueries,
		"ratio": round1(c.Ratio*100) / 100, "window_seconds": c.Window.Seconds(),
	})
	if c.Alarm {
		l.Warn("retry storm: the engine prefills for clients that already left (prompt tokens rise much slower than prefix-cache queries)")
		w.notice("retry_storm", fmt.Sprintf("RETRY STORM: over %s prompt tokens +%s vs prefix-cache queries +%s (ratio %.2f): the engine prefills for clients that already left",
			humanize.Duration(c.Window), humanize.Count(c.PromptTokens), humanize.Count(c.PrefixCacheQueries), c.Ratio))
	} else {
		l.Info("retry storm over")
		w.notice("retry_storm", fmt.Sprintf("retry storm over: prompt tokens +%s vs prefix-cache queries +%s over %s",
			humanize.Count(c.PromptTokens), humanize.Count(c.PrefixCacheQueries), humanize.Duration(c.Window)))
	}
}

// conditions are this cycle's standing conditions, by topic, for the
// Conditioner; each is logged once when it starts or changes: a probe
// that fails for a reason other than load (a configuration problem), an
// endpoint that misbehaves on an engine that serves, and configured
// metrics missing. None is a reason to restart.
func (w *Watchdog) conditions(v Verdict) map[string]string {
	c := map[string]string{}
	if pf := v.Evidence.ProbeFailing; pf != "" {
		c["probe_failing"] = "PROBE FAILING: the completion probe gets " + pf +
			"; not from load, so likely configuration (engine.model names a model the engine does not serve?); verdicts go on from the counters"
	}
	if pf := v.Evidence.ProbeFailing; pf != w.probeFailing {
		w.probeFailing = pf
		if pf != "" {
			w.log.WithField("probe", pf).Warn("watchdog: the completion probe fails, not from load: check engine.model and the engine's API key and log")
		}
	}
	odd := strings.Join(v.Evidence.Odd, "; ")
	if odd != "" {
		c["engine_odd"] = "ODD, NOT RESTARTING: " + odd
	}
	if odd != w.odd {
		w.odd = odd
		if odd != "" {
			w.log.WithField("odd", odd).Warn("watchdog: the engine serves but something is odd; not restarting")
		}
	}
	var missing []string
	for name, n := range w.missing {
		if n >= acceptShapeAfter {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		c["metrics_missing"] = "engine metrics missing from /metrics: " + strings.Join(missing, ", ") + " (check engine.metrics)"
	}
	return c
}

func (w *Watchdog) notice(kind, text string) {
	if w.opts.Notice != nil {
		w.opts.Notice(kind, text)
	}
}

// saturatedForLimiter is what the limiter is told: saturated while the
// verdict is, and through the calm period of a saturation incident
// (alerts.resolve_after). With the limiter holding the engine's queue near
// saturated_waiting the verdict flips every second or two; the limiter
// holds its cap's growth through the whole episode instead of growing
// between flips and being cut again at the next.
//
// The same holds through an unknown verdict that is only a stall short of
// the window: with one-second cycles under load a pair of samples without
// a counter move is common, and each flip off and on again would cut the
// limiter's cap by another step.
//
// Saturation seen only at the limiter (it sheds, the engine's queue is
// shallow) is the limiter doing its job: telling it would cut its cap and
// shed more.
func saturatedForLimiter(v Verdict, inc *Incident) bool {
	if v.State == StateSaturated {
		return !v.Evidence.LimiterOnly
	}
	shortStall := v.State == StateUnknown && v.Evidence.MetricsError == "" &&
		v.Evidence.Stalled > 0 && v.Evidence.Stalled < v.Evidence.HangAfter
	return (v.State == StateHealthy || shortStall) && inc.Open() && inc.Peak == StateSaturated && inc.EngineSaturated
}
