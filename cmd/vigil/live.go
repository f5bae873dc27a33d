package main

import (
	"fmt"
	"reflect"
	"strconv"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/overrides"
	"github.com/vigil-dev/vigil/status"
)

// liveSettings is the overrides' Applier: it reads and changes the live
// value of each overridable key (configs.OverridableKeys).
type liveSettings struct{ d *daemon }

func (s liveSettings) Get(key string) (string, error) {
	d := s.d
	switch key {
	case "admission.max_in_flight":
		if d.limiter == nil {
			return "", errNoLimiter
		}
		return strconv.Itoa(d.limiter.MaxInFlight()), nil
	case "watchdog.hang_after":
		return d.watchdog.Thresholds().HangAfter.String(), nil
	case "watchdog.saturated_waiting":
		return strconv.Itoa(d.watchdog.Thresholds().SaturatedWaiting), nil
	}
	return "", fmt.Errorf("%w: %s cannot be overridden", overrides.ErrInvalid, key)
}

func (s liveSettings) Set(key, value string) error {
	d := s.d
	switch key {
	case "admission.max_in_flight":
		if d.limiter == nil {
			return errNoLimiter
		}
		n, err := strconv.Atoi(value)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: %s must be a whole number >= 0 (0 = automatic), got %q", overrides.ErrInvalid, key, value)
		}
		d.limiter.SetMaxInFlight(n)
		return nil
	case "watchdog.hang_after":
		v, err := time.ParseDuration(value)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", overrides.ErrInvalid, key, err)
		}
		th := d.watchdog.Thresholds()
		if v <= d.config().Watchdog.Interval {
			return fmt.Errorf("%w: %s must be > interval (%s)", overrides.ErrInvalid, key, d.config().Watchdog.Interval)
		}
		th.HangAfter = v
		d.watchdog.SetThresholds(th)
		return nil
	case "watchdog.saturated_waiting":
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 {
			return fmt.Errorf("%w: %s must be a whole number >= 1, got %q", overrides.ErrInvalid, key, value)
		}
		th := d.watchdog.Thresholds()
		th.SaturatedWaiting = n
		d.watchdog.SetThresholds(th)
		return nil
	}
	return fmt.Errorf("%w: %s cannot be overridden", overrides.ErrInvalid, key)
}

// snapshot is /status: the verdict with its evidence, the incident, the
// recovery journal, the limiter, overrides, capacity and the pool.
func (d *daemon) snapshot() status.Snapshot {
	cfg := d.config()
	v, inc := d.watchdog.Current()
	s := status.Snapshot{
		Node: cfg.Node, Version: version, At: time.Now(), DryRun: cfg.Watchdog.DryRun,
		Verdict: v, Recovery: d.recovery.Snapshot(), Overrides: d.overrides.List(),
		Capacity: d.watchdog.Capacity(),
	}
	if inc != nil {
		s.Incident = inc
	}
	if d.limiter != nil {
		s.Limiter = d.limiter.Stats()
	}
	if len(cfg.Pool.Peers) > 0 {
		s.Pool = d.poolView()
	}
	if d.affinity != nil {
		s.Routing = d.affinity.Report()
	}
	return s
}

// reload is SIGHUP: load the file again; an invalid config is rejected
// with its error and the old one kept. Thresholds apply at once; changes
// that need new connections or listeners are named, with a restart hint.
func (d *daemon) reload(path string, dryRun bool) {
	next, err := configs.Load(path)
	if err != nil {
		d.log.WithError(err).Error("SIGHUP: new config rejected; keeping the running one")
		return
	}
	if dryRun {
		next.Watchdog.DryRun = true
	}
	cur := d.config()
	th := d.watchdog.Thresholds()
	th.HangAfter, th.SaturatedWaiting, th.ProbeSLO = next.Watchdog.HangAfter, next.Watchdog.SaturatedWaiting, next.Watchdog.ProbeSLO
	d.watchdog.SetThresholds(th)
	if d.limiter != nil && next.Admission.MaxInFlight != cur.Admission.MaxInFlight && !d.overridden("admission.max_in_flight") {
		d.limiter.SetMaxInFlight(next.Admission.MaxInFlight)
	}
	var restart []string
	for _, sec := range []struct {
		name     string
		old, new any
	}{
		{"engine", cur.Engine, next.Engine},
		{"load_balancer", cur.LoadBalancer, next.LoadBalancer},
		{"restart", cur.Restart, next.Restart},
		{"alerts", cur.Alerts, next.Alerts},
		{"status", cur.Status, next.Status},
		{"pool", cur.Pool, next.Pool},
		{"watchdog.interval", cur.Watchdog.Interval, next.Watchdog.Interval},
		{"watchdog.state_file", cur.Watchdog.StateFile, next.Watchdog.StateFile},
		{"admission (other than max_in_flight)", admissionSansCap(cur.Admission), admissionSansCap(next.Admission)},
	} {
		if !reflect.DeepEqual(sec.old, sec.new) {
			restart = append(restart, sec.name)
		}
	}
	d.mu.Lock()
	// Keep the running sections that need a restart, so /status tells the
	// truth about what is in force.
	applied := *cur
	applied.Watchdog.HangAfter, applied.Watchdog.SaturatedWaiting, applied.Watchdog.ProbeSLO = th.HangAfter, th.SaturatedWaiting, th.ProbeSLO
	applied.Admission.MaxInFlight = next.Admission.MaxInFlight
	d.cfg = &applied
	d.mu.Unlock()
	l := d.log.WithFields(map[string]any{
		"hang_after_seconds": th.HangAfter.Seconds(), "saturated_waiting": th.SaturatedWaiting,
		"probe_slo_seconds": th.ProbeSLO.Seconds(),
	})
	if len(restart) > 0 {
		l.WithField("needs_restart", restart).Warn("SIGHUP: config reloaded; thresholds applied; these changes take effect on restart (systemctl restart vigil)")
		return
	}
	l.Info("SIGHUP: config reloaded and applied")
}

func admissionSansCap(a configs.Admission) configs.Admission {
	a.MaxInFlight = 0
	return a
}

func (d *daemon) overridden(key string) bool {
	for _, o := range d.overrides.List() {
		if o.Key == key {
			return true
		}
	}
	return false
}
