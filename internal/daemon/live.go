package daemon

import (
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/alerts"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/overrides"
	"github.com/vigil-dev/vigil/pool"
	"github.com/vigil-dev/vigil/status"
	"github.com/vigil-dev/vigil/watchdog"
)

// liveSettings is the overrides' Applier: it reads and changes the live
// value of each overridable key through the table of live keys
// (configs.LiveKeys), on the config in force.
type liveSettings struct{ d *daemon }

func (s liveSettings) key(key string) (configs.LiveKey, error) {
	k, ok := configs.Live(key)
	if !ok || !k.Overridable {
		return configs.LiveKey{}, fmt.Errorf("%w: %s cannot be overridden", overrides.ErrInvalid, key)
	}
	if !s.d.canApply(key) {
		return configs.LiveKey{}, errNoLimiter
	}
	return k, nil
}

func (s liveSettings) Get(key string) (string, error) {
	k, err := s.key(key)
	if err != nil {
		return "", err
	}
	inForce := s.d.inForce()
	return k.Get(&inForce), nil
}

func (s liveSettings) Set(key, value string) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	next := s.d.inForce()
	if err := k.Set(&next, value); err != nil {
		return fmt.Errorf("%w: %s %s: %v", overrides.ErrInvalid, key, value, err)
	}
	s.d.applyLive(key, &next)
	return nil
}

// liveApply puts each live key's value in a config into the running
// parts that use it: the one place a reload or an override reaches them.
// Its keys are configs.LiveKeys' (a test holds them to that).
var liveApply = map[string]func(d *daemon, c *configs.Config){
	"admission.max_in_flight": func(d *daemon, c *configs.Config) { d.limiter.SetMaxInFlight(c.Admission.MaxInFlight) },
	"watchdog.hang_after": func(d *daemon, c *configs.Config) {
		d.updateThresholds(func(th *watchdog.Thresholds) { th.HangAfter = c.Watchdog.HangAfter.Duration() })
	},
	"watchdog.saturated_waiting": func(d *daemon, c *configs.Config) {
		d.updateThresholds(func(th *watchdog.Thresholds) { th.SaturatedWaiting = c.Watchdog.SaturatedWaiting })
	},
	"watchdog.probe_slo": func(d *daemon, c *configs.Config) {
		d.updateThresholds(func(th *watchdog.Thresholds) { th.ProbeSLO = c.Watchdog.ProbeSLO })
	},
	"watchdog.down_after": func(d *daemon, c *configs.Config) {
		d.updateThresholds(func(th *watchdog.Thresholds) { th.DownAfter = c.Watchdog.DownAfter })
	},
	// The status page reads the config in force at every request.
	"status.runbook_url": func(*daemon, *configs.Config) {},
}

func (d *daemon) applyLive(key string, c *configs.Config) { liveApply[key](d, c) }

// canApply says whether key can be applied in this daemon: the limiter's
// cap only while the limiter runs.
func (d *daemon) canApply(key string) bool {
	return key != "admission.max_in_flight" || d.limiter != nil
}

// snapshot is /status: the verdict with its evidence, the incident, the
// recovery journal, the limiter, overrides, capacity and the pool.
func (d *daemon) snapshot() status.Snapshot {
	cfg := d.config()
	v, inc := d.watchdog.Current()
	active := d.overrides.List()
	now := time.Now()
	plan := alerts.PlanNow(*cfg, d.recovery.Outlook(), now)
	s := status.Snapshot{
		Node: cfg.Node, Version: version, At: now, DryRun: cfg.Watchdog.DryRun,
		Engine: alerts.DisplayURL(cfg.Engine.URL), Started: d.started, RunbookURL: cfg.Status.RunbookURL,
		Plan: &status.Plan{Restart: plan.Restart, RestartTarget: plan.RestartTarget,
			LoadBalancer: plan.LoadBalancer, DrainTarget: plan.DrainTarget, Summary: plan.Summary},
		Verdict: v, Recovery: d.recovery.Snapshot(), Overrides: active,
		Capacity: d.watchdog.Capacity(), Config: d.configView(active),
	}
	if inc != nil {
		s.Incident = inc
	}
	if last := d.watchdog.LastIncident(); last != nil {
		s.LastIncident = last
	}
	if d.limiter != nil {
		s.LimiterLoad = d.limiterLoad()
		s.Limiter = d.limiter.Stats()
		s.Admission = cfg.Admission.Listen
	}
	if hasPool(cfg) {
		// An empty list, not null: the page tells "no member found" from
		// "no pool configured".
		s.Pool = append([]pool.Member{}, d.poolView()...)
	}
	if q := d.turnQueue(); q != nil {
		s.Turns = q
	}
	if d.affinity != nil {
		s.Routing = d.affinity.Report()
	}
	return s
}

// reloadResult is what a reload did with each changed key, for its log
// line and /status.
type reloadResult struct {
	// Applied: in force now.
	Applied []string
	// Held: the new value waits behind an override of the same key and
	// comes back at its expiry.
	Held []string
	// Restart: the new value takes effect at vigil's next start; the old
	// one stays in force and /status lists the key as pending.
	Restart []string
	// Failed: the new value was refused live; the old one stays.
	Failed []string
}

// reload is SIGHUP: load the file again through the same checks as run
// and check-config; an invalid file is refused whole and the running
// config kept. Every changed key is then either applied live (liveKey) or
// named as needing a restart; nothing is reported applied that is not.
// Overrides live through the API are not touched unless the file changes
// the same key, and even then the override stays in force until it ends
// (the file's value is restored then). Overrides written in the file are
// applied, or refused with their reason.
func (d *daemon) reload(path string, dryRun bool) {
	next, err := LoadConfig(path, dryRun)
	if err != nil {
		d.log.WithError(err).Error("SIGHUP: new config rejected; keeping the running one")
		return
	}
	for _, w := range next.Warnings {
		d.log.Warn(w)
	}
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	cur := d.config()
	inForce := *next
	var res reloadResult
	for _, c := range configs.Changed(cur, next) {
		if c.Key == "overrides" {
			continue // below: every reload applies the file's overrides
		}
		l := d.log.WithFields(logrus.Fields{"key": c.Key, "old": fmt.Sprint(c.Old), "new": fmt.Sprint(c.New)})
		apply, live := d.liveKey(c.Key, cur)
		if !live {
			inForce.Keep(c.Key, cur)
			res.Restart = append(res.Restart, c.Key)
			l.Warnf("SIGHUP: %s changed: needs a restart (systemctl restart vigil); still running with the old value", c.Key)
			continue
		}
		held, err := apply(next)
		switch {
		case err != nil:
			inForce.Keep(c.Key, cur)
			res.Failed = append(res.Failed, c.Key)
			l.WithError(err).Errorf("SIGHUP: %s changed but was not applied; still running with the old value", c.Key)
		case held != nil:
			res.Held = append(res.Held, c.Key)
			l.WithFields(logrus.Fields{"override": held.Value, "until": held.Until, "reason": held.Reason}).Warnf(
				"SIGHUP: %s changed, but an override holds it until %s: the new value applies when the override ends "+
					"(vigil override clear %s to apply it now)", c.Key, held.Until.UTC().Format(time.RFC3339), c.Key)
		default:
			res.Applied = append(res.Applied, c.Key)
			l.Infof("SIGHUP: %s changed: applied", c.Key)
		}
	}

	// The file's overrides: new ones are applied (and paged), bad ones
	// refused with the reason; ones in effect are left alone.
	if err := d.overrides.ApplyConfigured(next.Overrides); err != nil {
		d.log.WithError(err).Error("SIGHUP: an override in the config file was refused")
	}
	for _, a := range d.overrides.List() {
		if a.Source == overrides.SourceConfig && !inFile(a, next.Overrides) {
			d.log.WithFields(logrus.Fields{"key": a.Key, "value": a.Value, "until": a.Until}).Warnf(
				"SIGHUP: the override of %s is no longer in the config file; it stays until %s (vigil override clear %s ends it now)",
				a.Key, a.Until.UTC().Format(time.RFC3339), a.Key)
		}
	}

	d.mu.Lock()
	d.cfg = &inForce
	d.pending = res.Restart
	d.loadedAt = time.Now()
	d.mu.Unlock()

	l := d.log.WithFields(logrus.Fields{"applied": res.Applied, "held_by_override": res.Held,
		"needs_restart": res.Restart, "not_applied": res.Failed})
	switch {
	case len(res.Restart)+len(res.Failed) > 0:
		l.Warn("SIGHUP: config reloaded; some changes are NOT in force (see needs_restart, not_applied)")
	case len(res.Applied)+len(res.Held) == 0:
		l.Info("SIGHUP: config reloaded; no setting changed")
	default:
		l.Info("SIGHUP: config reloaded and applied")
	}
}

// liveKey says how a reload applies key without a restart; false means
// it needs one. apply returns the override holding the key, if any.
//
// Live: the keys of configs.LiveKeys (the classifier's thresholds and the
// limiter's cap among them). Everything else is read once at start
// (connections, listeners, the state file, the notifier, dry_run, which
// recovery and the watchdog both hold, and startup_grace, which the
// restart guard holds as well as the classifier). An overridable key goes
// through the overrides, which keep an override of it in force until it
// ends; the others are set on the config in force and applied.
func (d *daemon) liveKey(key string, cur *configs.Config) (apply func(next *configs.Config) (*overrides.Active, error), ok bool) {
	k, live := configs.Live(key)
	if !live || !d.canApply(key) {
		return nil, false // the limiter off: nothing to set until it runs
	}
	if k.Overridable {
		return func(next *configs.Config) (*overrides.Active, error) {
			a, held, err := d.overrides.SetConfigured(key, k.Get(next))
			if err != nil || !held {
				return nil, err
			}
			return &a, nil
		}, true
	}
	return func(next *configs.Config) (*overrides.Active, error) {
		inForce := *cur
		if err := k.Set(&inForce, k.Get(next)); err != nil {
			return nil, err
		}
		d.applyLive(key, &inForce)
		return nil, nil
	}, true
}

// updateThresholds changes the watchdog's thresholds in one
// read-modify-write, so a reload and an override never lose each other's
// change.
func (d *daemon) updateThresholds(edit func(*watchdog.Thresholds)) {
	d.thMu.Lock()
	defer d.thMu.Unlock()
	th := d.watchdog.Thresholds()
	edit(&th)
	d.watchdog.SetThresholds(th)
}

func inFile(a overrides.Active, file []configs.Override) bool {
	for _, o := range file {
		if o.Key == a.Key && o.Value == a.Value && o.Until.Equal(a.Until) {
			return true
		}
	}
	return false
}

// configView is /status's "config": what vigil runs with now.
type configView struct {
	File     string    `json:"file,omitempty"`
	LoadedAt time.Time `json:"loaded_at"`
	// InForce is every setting as in force: the file's values, except
	// keys waiting for a restart (their old values) and overridden keys
	// (the override's value). Secrets show only where they come from.
	InForce map[string]any `json:"in_force"`
	// PendingRestart are keys whose value in the file differs from the
	// one in force until vigil restarts.
	PendingRestart []string `json:"pending_restart,omitempty"`
	// Overridden are keys whose value in force is an override's.
	Overridden []string `json:"overridden,omitempty"`
}

// configView is the config in force: the file's values with the live
// thresholds, the limiter's cap and the active overrides over them.
func (d *daemon) configView(active []overrides.Active) configView {
	d.mu.Lock()
	v := configView{File: d.cfg.Source, LoadedAt: d.loadedAt.UTC(), PendingRestart: append([]string(nil), d.pending...)}
	d.mu.Unlock()
	eff := d.inForce()
	for _, a := range active {
		v.Overridden = append(v.Overridden, a.Key)
	}
	v.InForce = eff.Map()
	return v
}

// inForce is the config vigil runs with now: the file's values (those in
// force: a key waiting for a restart keeps its old one), with the
// watchdog's live thresholds and the limiter's cap, overrides included.
func (d *daemon) inForce() configs.Config {
	d.mu.Lock()
	eff := *d.cfg
	d.mu.Unlock()
	th := d.watchdog.Thresholds()
	eff.Watchdog.HangAfter = configs.Automatic() // the watchdog's 0
	if th.HangAfter > 0 {
		eff.Watchdog.HangAfter = configs.Fixed(th.HangAfter)
	}
	eff.Watchdog.SaturatedWaiting = th.SaturatedWaiting
	eff.Watchdog.ProbeSLO, eff.Watchdog.DownAfter = th.ProbeSLO, th.DownAfter
	if d.limiter != nil {
		eff.Admission.MaxInFlight = d.limiter.MaxInFlight()
	}
	return eff
}
