package overrides

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"
	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/state"
	"github.com/vigil-dev/vigil/util/cronlog"
	"github.com/vigil-dev/vigil/util/humanize"
)

// Applier reads and changes vigil's live settings by config key (one of
// configs.OverridableKeys), as text. It is the only thing the manager knows
// of the limiter and the watchdog. Get must return the live value, so build
// the limiter and watchdog before calling Manager.Resume. Set should wrap
// ErrInvalid when it rejects a value, so the API answers 400. It is called
// with the manager's lock held (so Get and Set of one key never interleave)
// and must not call back into the Manager.
type Applier interface {
	// Get returns the value now in effect for key.
	Get(key string) (string, error)
	// Set puts value in effect for key.
	Set(key, value string) error
}

// Notifier tells humans (the alerts pager, later). It must not block.
type Notifier interface {
	Notice(kind, text string)
}

// The kinds of notice the manager sends, for the pager to route.
const (
	KindStarted       = "override_started"
	KindUpdated       = "override_updated"
	KindReminder      = "override_reminder"
	KindExpired       = "override_expired"
	KindCleared       = "override_cleared"
	KindRestoreFailed = "override_restore_failed"
)

// Where an override came from.
const (
	SourceAPI    = "api"
	SourceConfig = "config"
)

// StateSection is the state file section holding active overrides.
const StateSection = "overrides"

// DefaultSchedule runs the expiry check every minute, so an override ends
// within a minute of its until.
const DefaultSchedule = "@every 1m"

// DefaultRemindBefore is how long before expiry the reminder is paged.
const DefaultRemindBefore = time.Hour

var (
	// ErrInvalid marks an override refused by the rules (no until, no
	// reason, too far away, unknown key, unparsable value).
	ErrInvalid = errors.New("invalid override")
	// ErrNotActive is returned by Clear for a key with no override.
	ErrNotActive = errors.New("no active override")
)

// Active is an override in effect, with the value it replaced: the value
// restored at expiry. It is what List returns, what the state file keeps
// and what the status API shows.
type Active struct {
	Key    string    `json:"key"`
	Value  string    `json:"value"`
	Until  time.Time `json:"until"`
	Reason string    `json:"reason"`
	// Replaced is the value in effect before the first override of this
	// key; a second override on the same key keeps it.
	Replaced string    `json:"replaced"`
	Started  time.Time `json:"started"`
	// Source is SourceAPI or SourceConfig.
	Source string `json:"source"`
	// Reminded: the before-expiry reminder has been paged.
	Reminded bool `json:"reminded"`
	// RestoreFailed: restoring at expiry failed and was paged; Tick keeps
	// retrying without paging again.
	RestoreFailed bool `json:"restore_failed,omitempty"`
}

// clearedConfig remembers a config-file override an operator cleared early,
// until its own expiry, so restarting vigil does not re-apply it.
type clearedConfig struct {
	Key   string    `json:"key"`
	Value string    `json:"value"`
	Until time.Time `json:"until"`
}

type persisted struct {
	Active  []Active        `json:"active"`
	Cleared []clearedConfig `json:"cleared_config,omitempty"`
}

// Options configures a Manager. Applier is required.
type Options struct {
	Applier Applier
	// Notifier pages; nil means notices are only logged.
	Notifier Notifier
	// Store journals active overrides; nil keeps them in memory only
	// (tests, demo), and they then do not survive a restart.
	Store *state.Store
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	Log *logrus.Entry
	// Registerer receives vigil_overrides_* metrics; nil registers none.
	Registerer prometheus.Registerer
	// RemindBefore pages a reminder once when less than this remains
	// (default DefaultRemindBefore).
	RemindBefore time.Duration
	// Schedule is the cron spec of the expiry check (default
	// DefaultSchedule).
	Schedule string
}

// Manager applies overrides and reverts them at expiry. It is safe for
// concurrent use: the API, the cron job and startup may overlap.
type Manager struct {
	applier  Applier
	notifier Notifier
	store    *state.Store
	now      func() time.Time
	log      *logrus.Entry
	remind   time.Duration
	cron     *cron.Cron

	activeGauge prometheus.Gauge
	expired     prometheus.Counter

	mu      sync.Mutex
	active  map[string]*Active
	cleared []clearedConfig
}

type notice struct{ kind, text string }

// New loads the overrides journaled in the state file and prepares the
// expiry job. It changes nothing live: call Resume once the limiter and
// watchdog exist, then Run.
func New(o Options) (*Manager, error) {
	if o.Applier == nil {
		return nil, errors.New("overrides: an Applier is required")
	}
	m := &Manager{
		applier:  o.Applier,
		notifier: o.Notifier,
		store:    o.Store,
		now:      o.Now,
		log:      o.Log,
		remind:   o.RemindBefore,
		active:   map[string]*Active{},
		activeGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "vigil_overrides_active",
			Help: "Overrides in effect, each reverted at its expiry.",
		}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_overrides_expired_total",
			Help: "Overrides reverted at their expiry, including those that expired while vigil was down.",
		}),
	}
	if m.store == nil {
		m.store = state.Memory()
	}
	if m.now == nil {
		m.now = time.Now
	}
	if m.log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		m.log = logrus.NewEntry(l)
	}
	if m.remind <= 0 {
		m.remind = DefaultRemindBefore
	}
	if o.Registerer != nil {
		for _, c := range []prometheus.Collector{m.activeGauge, m.expired} {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("overrides: register metrics: %w", err)
			}
		}
	}

	var p persisted
	if _, err := m.store.Load(StateSection, &p); err != nil {
		return nil, fmt.Errorf("overrides: load journaled overrides: %w", err)
	}
	for _, a := range p.Active {
		m.active[a.Key] = &a
	}
	m.cleared = p.Cleared
	m.activeGauge.Set(float64(len(m.active)))

	schedule := o.Schedule
	if schedule == "" {
		schedule = DefaultSchedule
	}
	cl := cronlog.New(m.log.WithField("component", "overrides_cron"))
	m.cron = cron.New(
		cron.WithLocation(time.UTC),
		cron.WithLogger(cl),
		// A panicking check must not take the daemon down, and a slow
		// Applier must not stack checks on top of each other.
		cron.WithChain(cron.Recover(cl), cron.SkipIfStillRunning(cl)),
	)
	if _, err := m.cron.AddFunc(schedule, func() { m.Tick(m.now()) }); err != nil {
		return nil, fmt.Errorf("overrides: schedule %q: %w", schedule, err)
	}
	return m, nil
}

// Run starts the expiry job and blocks until ctx ends, then waits for a
// check in progress to finish.
func (m *Manager) Run(ctx context.Context) {
	m.cron.Start()
	<-ctx.Done()
	<-m.cron.Stop().Done()
}

// Resume reconciles the journal with the live settings after vigil
// (re)starts, then applies the overrides written in the config file.
//
// A journaled override that expired while vigil was down is reverted if
// it is still live, dropped and paged either way. One still running is put
// back in effect if vigil's restart reset it; if the live value it finds
// then differs from the one journaled (the config file was edited), the
// live one is what expiry restores. Config-file overrides follow the same
// rules as the API; expired ones, ones already in effect and ones an
// operator cleared early are skipped. Errors are joined; the rest still
// runs.
func (m *Manager) Resume(configured []configs.Override) error {
	now := m.now()
	var errs []error
	var notices []notice

	m.mu.Lock()
	changed := false
	for _, key := range m.keysLocked() {
		a := m.active[key]
		cur, err := m.applier.Get(key)
		if err != nil {
			errs = append(errs, fmt.Errorf("overrides: read current %s to resume its override: %w", key, err))
			continue
		}
		log := m.log.WithFields(logrus.Fields{"key": key, "value": a.Value, "until": a.Until, "reason": a.Reason})
		if !now.Before(a.Until) {
			text := fmt.Sprintf("override expired while vigil was down (at %s): %s", stamp(a.Until), key)
			if cur == a.Value {
				if err := m.applier.Set(key, a.Replaced); err != nil {
					errs = append(errs, fmt.Errorf("overrides: restore %s=%s: %w", key, a.Replaced, err))
					continue // Tick retries and pages
				}
				log.WithFields(logrus.Fields{"restored": a.Replaced, "was": cur}).Warn("override expired while vigil was down; restored")
				text += fmt.Sprintf(" restored %s → %s (%s)", a.Value, a.Replaced, a.Reason)
			} else {
				// vigil's own restart already put the configured value back.
				log.WithField("live", cur).Warn("override expired while vigil was down; no longer in effect")
				text += fmt.Sprintf(" %s is no longer in effect, live value %s (%s)", a.Value, cur, a.Reason)
			}
			notices = append(notices, notice{KindExpired, text})
			delete(m.active, key)
			m.expired.Inc()
			changed = true
			continue
		}
		if cur == a.Value {
			continue // still in effect
		}
		if cur != a.Replaced {
			log.WithFields(logrus.Fields{"recorded": a.Replaced, "live": cur}).Warn(
				"the value this override replaced changed while vigil was down (config edited?); the live one is restored at expiry")
			a.Replaced = cur
		}
		if err := m.applier.Set(key, a.Value); err != nil {
			delete(m.active, key)
			changed = true
			errs = append(errs, fmt.Errorf("overrides: re-apply %s=%s after restart: %w", key, a.Value, err))
			notices = append(notices, notice{KindRestoreFailed, fmt.Sprintf(
				"override on %s could not be re-applied after vigil restarted (%v); %s stays in effect", key, err, cur)})
			continue
		}
		log.WithField("replaced", a.Replaced).Info("override resumed after restart")
		changed = true
	}
	if m.pruneClearedLocked(now) {
		changed = true
	}
	if changed {
		if err := m.saveLocked(); err != nil {
			errs = append(errs, err)
		}
	}
	m.activeGauge.Set(float64(len(m.active)))
	m.mu.Unlock()
	m.send(notices)

	if err := m.ApplyConfigured(configured); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ApplyConfigured applies the overrides written in the config file, at
// start and at every reload: each is validated and applied like one from
// the API, or refused with the reason in the returned error. Expired ones,
// ones already in effect (same key, value and until) and ones an operator
// cleared early are skipped. Errors are joined; the rest still apply.
func (m *Manager) ApplyConfigured(configured []configs.Override) error {
	now := m.now()
	var errs []error
	for _, o := range configured {
		log := m.log.WithFields(logrus.Fields{"key": o.Key, "value": o.Value, "until": o.Until, "source": SourceConfig})
		switch {
		case !o.Until.IsZero() && !now.Before(o.Until):
			log.Info("config override already expired; skipped")
			continue
		case m.wasCleared(o):
			log.Info("config override was cleared early by an operator; not re-applied")
			continue
		case m.inEffect(o):
			continue
		}
		if err := m.set(o, SourceConfig); err != nil {
			errs = append(errs, fmt.Errorf("overrides: config override %s=%s: %w", o.Key, o.Value, err))
		}
	}
	return errors.Join(errs...)
}

// SetConfigured puts a new configured (config file) value of key in
// force, as a reload does. While an override holds key, the live value
// stays the override's and the new value becomes the one restored at its
// expiry: an override is a deliberate, announced, temporary choice that a
// file edit does not silently end (clear it to apply the file now). It
// reports the override holding the key, if any. The check and the change
// happen under the manager's lock, so an override set or expiring at the
// same moment cannot be lost.
func (m *Manager) SetConfigured(key, value string) (Active, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.active[key]
	if !ok {
		return Active{}, false, m.applier.Set(key, value)
	}
	if a.Replaced == value {
		return *a, true, nil
	}
	was := a.Replaced
	a.Replaced = value
	if err := m.saveLocked(); err != nil {
		a.Replaced = was
		return *a, true, err
	}
	m.log.WithFields(logrus.Fields{"key": key, "override": a.Value, "until": a.Until, "restored_at_expiry": value, "was": was}).
		Warn("the configured value changed while an override holds the key; the override stays, the new value is restored at its expiry")
	return *a, true, nil
}

// Set applies an override from the API: validated (until and reason are
// mandatory, at most configs.MaxOverride away), the replaced value
// journaled before the change, then applied and paged. Overriding a key
// that is already overridden keeps the original replaced value.
func (m *Manager) Set(o configs.Override) error { return m.set(o, SourceAPI) }

func (m *Manager) set(o configs.Override, source string) error {
	now := m.now()
	// The same rules as the config file, the value's type included.
	if err := configs.ValidateOverride(o, now); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}

	m.mu.Lock()
	prev, had := m.active[o.Key]
	next := &Active{
		Key: o.Key, Value: o.Value, Until: o.Until.UTC(), Reason: o.Reason,
		Started: now.UTC(), Source: source,
		// Nobody needs reminding of an override that is that short.
		Reminded: o.Until.Sub(now) <= m.remind,
	}
	live := ""
	if had {
		next.Replaced, next.Started, live = prev.Replaced, prev.Started, prev.Value
	} else {
		cur, err := m.applier.Get(o.Key)
		if err != nil {
			m.mu.Unlock()
			return fmt.Errorf("overrides: read current %s: %w", o.Key, err)
		}
		next.Replaced, live = cur, cur
	}
	// Journal first: a vigil killed between the two steps then still
	// knows what to restore, which is the whole point.
	m.active[o.Key] = next
	if err := m.saveLocked(); err != nil {
		m.putBackLocked(o.Key, prev, had)
		m.mu.Unlock()
		return fmt.Errorf("overrides: journal %s before applying it: %w", o.Key, err)
	}
	if err := m.applier.Set(o.Key, o.Value); err != nil {
		m.putBackLocked(o.Key, prev, had)
		if serr := m.saveLocked(); serr != nil {
			m.log.WithError(serr).WithField("key", o.Key).Error("could not journal a refused override's removal")
		}
		m.mu.Unlock()
		return fmt.Errorf("overrides: apply %s=%s: %w", o.Key, o.Value, err)
	}
	m.activeGauge.Set(float64(len(m.active)))
	m.mu.Unlock()

	m.log.WithFields(logrus.Fields{
		"key": o.Key, "value": o.Value, "was": live, "replaced": next.Replaced,
		"until": next.Until, "reason": o.Reason, "source": source,
	}).Warn("override set")
	kind, text := KindStarted, fmt.Sprintf("override started: %s %s → %s until %s (%s)",
		o.Key, live, o.Value, stamp(next.Until), o.Reason)
	if had {
		kind, text = KindUpdated, fmt.Sprintf("override updated: %s %s → %s until %s (%s); %s is restored at expiry",
			o.Key, live, o.Value, stamp(next.Until), o.Reason, next.Replaced)
	}
	m.send([]notice{{kind, text}})
	return nil
}

// Clear ends the override on key now, restoring the value it replaced,
// and returns what it was. ErrNotActive if key has none.
func (m *Manager) Clear(key string) (Active, error) {
	now := m.now()
	m.mu.Lock()
	a, ok := m.active[key]
	if !ok {
		m.mu.Unlock()
		return Active{}, fmt.Errorf("%w on %s", ErrNotActive, key)
	}
	if err := m.applier.Set(key, a.Replaced); err != nil {
		m.mu.Unlock()
		return Active{}, fmt.Errorf("overrides: restore %s=%s: %w", key, a.Replaced, err)
	}
	delete(m.active, key)
	if a.Source == SourceConfig {
		m.cleared = append(m.cleared, clearedConfig{Key: a.Key, Value: a.Value, Until: a.Until})
	}
	m.pruneClearedLocked(now)
	if err := m.saveLocked(); err != nil {
		// The live value is restored; a stale journal entry only makes the
		// next start restore it again, which is harmless.
		m.log.WithError(err).WithField("key", key).Error("could not journal a cleared override")
	}
	m.activeGauge.Set(float64(len(m.active)))
	m.mu.Unlock()

	m.log.WithFields(logrus.Fields{
		"key": key, "restored": a.Replaced, "was": a.Value, "reason": a.Reason, "until": a.Until,
	}).Warn("override cleared early; restored")
	m.send([]notice{{KindCleared, fmt.Sprintf("override cleared early: %s restored %s → %s (%s)",
		key, a.Value, a.Replaced, a.Reason)}})
	return *a, nil
}

// List returns the overrides in effect, by key.
func (m *Manager) List() []Active {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Active, 0, len(m.active))
	for _, k := range m.keysLocked() {
		out = append(out, *m.active[k])
	}
	return out
}

// Tick does the scheduled work as of now: pages the reminder of an
// override about to end (once), and restores every expired override's
// replaced value, logging and paging what it restored. A restore that
// fails is paged once and retried on every Tick.
func (m *Manager) Tick(now time.Time) {
	var notices []notice
	m.mu.Lock()
	changed := false
	for _, key := range m.keysLocked() {
		a := m.active[key]
		log := m.log.WithFields(logrus.Fields{"key": key, "restored": a.Replaced, "was": a.Value, "reason": a.Reason, "until": a.Until})
		switch {
		case !now.Before(a.Until):
			if err := m.applier.Set(key, a.Replaced); err != nil {
				log.WithError(err).Error("override expired but restoring failed; retrying every check")
				if !a.RestoreFailed {
					a.RestoreFailed, changed = true, true
					notices = append(notices, notice{KindRestoreFailed, fmt.Sprintf(
						"override expired but restoring %s to %s failed: %v; %s stays in effect, retrying every minute",
						key, a.Replaced, err, a.Value)})
				}
				continue
			}
			delete(m.active, key)
			m.expired.Inc()
			changed = true
			log.Warn("override expired; restored")
			notices = append(notices, notice{KindExpired, fmt.Sprintf("override expired: %s restored %s → %s (%s)",
				key, a.Value, a.Replaced, a.Reason)})
		case !a.Reminded && a.Until.Sub(now) <= m.remind:
			a.Reminded, changed = true, true
			log.Info("override ends soon; reminder paged")
			notices = append(notices, notice{KindReminder, fmt.Sprintf(
				"override ends in %s: %s %s → %s at %s (%s); set a new override before then to keep it",
				humanize.Remaining(a.Until.Sub(now)), key, a.Value, a.Replaced, stamp(a.Until), a.Reason)})
		}
	}
	if m.pruneClearedLocked(now) {
		changed = true
	}
	if changed {
		if err := m.saveLocked(); err != nil {
			m.log.WithError(err).Error("could not journal override changes")
		}
	}
	m.activeGauge.Set(float64(len(m.active)))
	m.mu.Unlock()
	m.send(notices)
}

func (m *Manager) inEffect(o configs.Override) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.active[o.Key]
	return ok && a.Value == o.Value && a.Until.Equal(o.Until)
}

func (m *Manager) wasCleared(o configs.Override) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.ContainsFunc(m.cleared, func(c clearedConfig) bool {
		return c.Key == o.Key && c.Value == o.Value && c.Until.Equal(o.Until)
	})
}

func (m *Manager) pruneClearedLocked(now time.Time) bool {
	n := len(m.cleared)
	m.cleared = slices.DeleteFunc(m.cleared, func(c clearedConfig) bool { return !now.Before(c.Until) })
	return len(m.cleared) != n
}

func (m *Manager) putBackLocked(key string, prev *Active, had bool) {
	if had {
		m.active[key] = prev
	} else {
		delete(m.active, key)
	}
}

func (m *Manager) keysLocked() []string {
	keys := make([]string, 0, len(m.active))
	for k := range m.active {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (m *Manager) saveLocked() error {
	p := persisted{Active: make([]Active, 0, len(m.active)), Cleared: m.cleared}
	for _, k := range m.keysLocked() {
		p.Active = append(p.Active, *m.active[k])
	}
	if err := m.store.Save(StateSection, p); err != nil {
		return fmt.Errorf("overrides: journal: %w", err)
	}
	return nil
}

func (m *Manager) send(notices []notice) {
	for _, n := range notices {
		if m.notifier == nil {
			m.log.WithField("kind", n.kind).Info(n.text)
			continue
		}
		m.notifier.Notice(n.kind, n.text)
	}
}

// stamp formats a time for pages: UTC RFC 3339, copy-pastable into a new
// override.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
