package configs

import "time"

// Watchdog tunes sampling and the saturated-versus-hung classifier
// (docs/design.md sections 2 and 3).
type Watchdog struct {
	// Interval between samples.
	Interval time.Duration `yaml:"interval"`
	// HangAfter: no progress signal moving for this long while work is
	// pending means hung. It must exceed the longest legitimate gap between
	// counter moves (the longest prefill); `vigil diagnose` reports that gap.
	// auto (the default) sizes it each cycle from the work the engine has,
	// between HangAfterMin and HangAfterMax (docs/design.md section 3, "the
	// window in force").
	HangAfter AutoDuration `yaml:"hang_after"`
	// HangAfterMin and HangAfterMax bound the automatic window: the floor
	// against a history too calm to trust, the ceiling for work vigil
	// cannot size (requests that bypass the limiter, an engine never seen
	// serving).
	HangAfterMin time.Duration `yaml:"hang_after_min"`
	HangAfterMax time.Duration `yaml:"hang_after_max"`
	// ProbeTimeout bounds the two-token completion probe.
	ProbeTimeout time.Duration `yaml:"probe_timeout"`
	// ProbeSLO: a probe slower than this counts as a saturation sign.
	ProbeSLO time.Duration `yaml:"probe_slo"`
	// SaturatedWaiting: waiting requests at or above this, with progress,
	// is saturated.
	SaturatedWaiting int `yaml:"saturated_waiting"`
	// SaturatedShed: with the admission limiter in front, the node is
	// saturated when the limiter answers at least this share of calls with
	// 429/503 over the last few cycles, however shallow the engine's own
	// queue (the limiter keeps it so). 0 turns the rule off.
	SaturatedShed float64 `yaml:"saturated_shed"`
	// DownAfter: consecutive failed samples of /health or /v1/models
	// before the engine counts as down.
	DownAfter int `yaml:"down_after"`
	// StartupGrace: after a (re)start, the engine is "loading" until it
	// serves or this elapses.
	StartupGrace time.Duration `yaml:"startup_grace"`
	// StateFile keeps incidents, the recovery journal, cooldowns and the
	// page outbox across vigil's own restarts. Written atomically.
	StateFile string `yaml:"state_file"`
	// DryRun runs the whole loop but only logs and pages what it would do.
	DryRun bool `yaml:"dry_run"`
	// RetryStorm configures the retry-storm alarm (docs/design.md section 2).
	RetryStorm RetryStorm `yaml:"retry_storm"`
}

// RetryStorm: over Window, prompt tokens rising by less than Ratio of
// prefix-cache queries means the engine prefills for clients that left.
type RetryStorm struct {
	Enabled bool          `yaml:"enabled"`
	Window  time.Duration `yaml:"window"`
	Ratio   float64       `yaml:"ratio"`
	// MinQueries ignores windows with too little traffic to judge.
	MinQueries float64 `yaml:"min_queries"`
}

// HangAfterCeiling is the longest window hang_after can be: the fixed
// value, or hang_after_max when auto.
func (w Watchdog) HangAfterCeiling() time.Duration {
	if w.HangAfter.IsAuto() {
		return w.HangAfterMax
	}
	return w.HangAfter.Duration()
}

func defaultWatchdog() Watchdog {
	return Watchdog{
		Interval:         5 * time.Second,
		HangAfter:        Automatic(),
		HangAfterMin:     15 * time.Second,
		HangAfterMax:     180 * time.Second,
		ProbeTimeout:     90 * time.Second,
		ProbeSLO:         30 * time.Second,
		SaturatedWaiting: 8,
		SaturatedShed:    0.1,
		DownAfter:        2,
		StartupGrace:     10 * time.Minute,
		StateFile:        "/var/lib/vigil/state.json",
		RetryStorm: RetryStorm{
			Enabled:    true,
			Window:     5 * time.Minute,
			Ratio:      0.5,
			MinQueries: 100000,
		},
	}
}

func (w *Watchdog) validate(v *validator) {
	v.positive("watchdog.interval", w.Interval)
	switch {
	case w.HangAfter.IsAuto():
		if v.positive("watchdog.hang_after_min", w.HangAfterMin) && w.HangAfterMin < w.Interval {
			v.errorf("watchdog.hang_after_min", "must be >= interval (%s)", w.Interval)
		}
		if w.HangAfterMax < w.HangAfterMin {
			v.errorf("watchdog.hang_after_max", "must be >= hang_after_min (%s)", w.HangAfterMin)
		}
	case w.HangAfter.Duration() <= 0:
		v.errorf("watchdog.hang_after", "must be > 0, or auto")
	case w.HangAfter.Duration() <= w.Interval:
		v.errorf("watchdog.hang_after", "must be > interval (%s), or auto", w.Interval)
	}
	v.positive("watchdog.probe_timeout", w.ProbeTimeout)
	if v.positive("watchdog.probe_slo", w.ProbeSLO) && w.ProbeSLO > w.ProbeTimeout {
		v.errorf("watchdog.probe_slo", "must be <= probe_timeout (%s)", w.ProbeTimeout)
	}
	if w.SaturatedWaiting < 1 {
		v.errorf("watchdog.saturated_waiting", "must be >= 1")
	}
	if w.SaturatedShed < 0 || w.SaturatedShed > 1 {
		v.errorf("watchdog.saturated_shed", "must be between 0 (off) and 1")
	}
	if w.DownAfter < 1 {
		v.errorf("watchdog.down_after", "must be >= 1")
	}
	nonNegative(v, "watchdog.startup_grace", w.StartupGrace, "")
	v.nonEmpty("watchdog.state_file", w.StateFile)
	if w.RetryStorm.Enabled {
		if v.positive("watchdog.retry_storm.window", w.RetryStorm.Window) && w.RetryStorm.Window < 2*w.Interval {
			v.errorf("watchdog.retry_storm.window", "must be >= 2 intervals (%s)", 2*w.Interval)
		}
		if w.RetryStorm.Ratio <= 0 || w.RetryStorm.Ratio >= 1 {
			v.errorf("watchdog.retry_storm.ratio", "must be between 0 and 1 (exclusive)")
		}
	}
}
