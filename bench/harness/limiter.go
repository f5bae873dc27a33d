package harness

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/admission"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/simclient"
)

// TimeMode says how a limiter keeps time beside a time-scaled engine.
type TimeMode string

const (
	// TimeClock runs the limiter on engine time (admission.WithClock with
	// a clock Scale times faster than the wall) and its config as written:
	// every duration it knows, configured or built in (its completion-rate
	// window, its Retry-After when no rate is known, the automatic cap's
	// sampling windows), keeps its proportion to the engine, and its
	// Retry-After is engine seconds. Only the HTTP server's read timeouts,
	// which guard against slow clients, stay wall time.
	TimeClock TimeMode = "clock"
	// TimeConfig runs the limiter on the wall clock with every config
	// duration divided by Scale (simclient.ScaleAdmission). Its built-in constants
	// stay wall time, i.e. Scale times longer than they would be beside a
	// real engine; its Retry-After is wall seconds.
	TimeConfig TimeMode = "config"
)

// ParseTimeMode reads a -limiter-time flag value.
func ParseTimeMode(s string) (TimeMode, error) {
	switch m := TimeMode(s); m {
	case TimeClock, TimeConfig:
		return m, nil
	}
	return "", fmt.Errorf("limiter time mode %q: want clock or config", s)
}

// stallResolution is the shortest silence, in wall time, a time-scaled
// run on this machine tells from its own pauses: enginesim lets its
// schedule lag 20 ms before it restarts it, and a loaded machine's timers
// fire as late. On engine time (TimeClock) it is scale times longer: 7.5 s
// beside bench/goodput's slow10 (scale 300), where a second's floor made
// the stall watch suspect the machine (issue #36), so the limiter's stall
// floor is raised to it (admission.WithStallFloor).
const stallResolution = 25 * time.Millisecond

// Limiter is vigil's admission limiter serving a loopback port.
type Limiter struct {
	*admission.Limiter
	url         string
	headerScale float64
	cancel      context.CancelFunc
	served      chan error
}

// StartLimiter builds the limiter from cfg (engine time) in front of
// upstream (the engine's base URL) and serves it on a free loopback port.
// engineKey is injected upstream when cfg.InjectAPIKey is on. extra
// options (e.g. admission.WithPeers) come after the harness's own, so they
// may replace its logger.
func StartLimiter(ctx context.Context, cfg configs.Admission, upstream, engineKey string, scale float64, mode TimeMode, extra ...admission.Option) (*Limiter, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("limiter: upstream %q: %w", upstream, err)
	}
	var opts []admission.Option
	hs := 1.0
	if scale > 0 && scale != 1 {
		switch mode {
		case TimeClock:
			opts = append(opts, admission.WithClock(NewScaledClock(scale)))
			if f := time.Duration(float64(stallResolution) * scale); f > time.Second {
				opts = append(opts, admission.WithStallFloor(f))
			}
		case TimeConfig:
			cfg = simclient.ScaleAdmission(cfg, scale)
			hs = scale
		default:
			return nil, fmt.Errorf("limiter: unknown time mode %q", mode)
		}
	}
	lg := logrus.New()
	lg.SetLevel(logrus.WarnLevel)
	if lvl, err := logrus.ParseLevel(os.Getenv("VIGIL_LIMITER_LOG")); err == nil {
		lg.SetLevel(lvl) // e.g. trace: every step of the automatic cap, to read a run by
	}
	opts = append(opts, admission.WithLogger(logrus.NewEntry(lg).WithField("bench", "limiter")))
	opts = append(opts, extra...)
	lim, err := admission.New(cfg, u, configs.Secret(engineKey), opts...)
	if err != nil {
		return nil, fmt.Errorf("limiter: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		lim.Close()
		return nil, fmt.Errorf("limiter: listen: %w", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	l := &Limiter{Limiter: lim, url: "http://" + ln.Addr().String(), headerScale: hs, cancel: cancel, served: make(chan error, 1)}
	go func() { l.served <- lim.Serve(sctx, ln) }()
	return l, nil
}

// URL is the limiter's base URL.
func (l *Limiter) URL() string { return l.url }

// HeaderScale converts the limiter's Retry-After and a client timeout
// between its time and engine time (see simclient.Caller.HeaderScale).
func (l *Limiter) HeaderScale() float64 { return l.headerScale }

// Close stops serving and cancels what the limiter still runs.
func (l *Limiter) Close() {
	l.cancel()
	l.Limiter.Close()
	select {
	case <-l.served:
	case <-time.After(10 * time.Second):
	}
}

// Brief is a one-line state of the limiter: queue, in-flight, cap,
// executions started and calls seen.
func (l *Limiter) Brief() string {
	s := l.Stats()
	return fmt.Sprintf("| vigil queue=%d in_flight=%d cap=%d executions=%d calls=%d rejected=%d attached=%d stored=%d",
		s.QueueDepth, s.InFlight, s.Cap, s.Executions, s.Calls, sumRejected(s.Rejected), s.CoalescedAttached, s.CoalescedStored)
}

// Summary is every counter of the limiter on one line.
func (l *Limiter) Summary() string {
	s := l.Stats()
	var rej []string
	for _, r := range slices.Sorted(maps.Keys(s.Rejected)) {
		if n := s.Rejected[r]; n > 0 {
			rej = append(rej, fmt.Sprintf("%s=%d", r, n))
		}
	}
	return fmt.Sprintf("calls=%d executions=%d retries=%d admitted=%d queued=%d queue_abandoned=%d rejected{%s} "+
		"attached=%d stored=%d adopted=%d adopted_stored=%d cancelled_immediate=%d cancelled_deferred=%d upstream_errors=%d cap=%d "+
		"stall_suspicions=%d held_waits=%d paused=%s",
		s.Calls, s.Executions, s.Retries, s.Admitted, s.Queued, s.QueueAbandoned, strings.Join(rej, " "),
		s.CoalescedAttached, s.CoalescedStored, s.Adopted, s.AdoptedStored, s.CancelledImmediate, s.CancelledDeferred,
		s.UpstreamErrors, s.Cap, s.Suspicions, s.HeldWaits, s.Paused.Round(time.Millisecond))
}

func sumRejected(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

// ScaledClock is an admission.Clock whose time runs Scale times faster
// than the wall, from the moment it was made.
type ScaledClock struct {
	start time.Time
	scale float64
}

// NewScaledClock starts a scaled clock now.
func NewScaledClock(scale float64) *ScaledClock {
	return &ScaledClock{start: time.Now(), scale: scale}
}

// Now is the scaled time.
func (c *ScaledClock) Now() time.Time {
	return c.start.Add(time.Duration(float64(time.Since(c.start)) * c.scale))
}

// Scale is engine time per wall time: the limiter's pause meter ticks on
// wall time by it.
func (c *ScaledClock) Scale() float64 { return c.scale }

// AfterFunc runs f after d of scaled time.
func (c *ScaledClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(time.Duration(float64(d)/c.scale), f).Stop
}
