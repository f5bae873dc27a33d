package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/robfig/cron/v3"
	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/admission"
	"github.com/vigil-dev/vigil/alerts"
	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/overrides"
	"github.com/vigil-dev/vigil/pool/coord"
	"github.com/vigil-dev/vigil/probes"
	"github.com/vigil-dev/vigil/recoverer"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/restarter"
	"github.com/vigil-dev/vigil/routing"
	"github.com/vigil-dev/vigil/state"
	"github.com/vigil-dev/vigil/status"
	"github.com/vigil-dev/vigil/util/cronlog"
	"github.com/vigil-dev/vigil/util/pausemeter"
	"github.com/vigil-dev/vigil/watchdog"
)

// Flags are `vigil run`'s command line, parsed by internal/cli.
type Flags struct {
	Config   string // --config
	DryRun   bool   // --dry-run
	LogLevel string // --log-level: debug, info, warn or error
	LogJSON  bool   // --log-json
}

// Exit codes of Main, the same as every vigil subcommand's.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2 // a config error
)

// Main is `vigil run`: the watchdog, the recovery, the pager, the
// admission limiter and vigil's own status listener, until SIGTERM. It
// returns the exit code: 0 when stopped, 1 when a part cannot start or
// fails, 2 on a config error.
func Main(f Flags, stderr io.Writer) int {
	cfg, err := LoadConfig(f.Config, f.DryRun)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	log, err := newLogger(stderr, f.LogLevel, f.LogJSON)
	if err != nil {
		fmt.Fprintf(stderr, "vigil run: %v\n", err)
		return exitUsage
	}
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}
	if w := startupWatchdogWarning(cfg); w != "" {
		log.Warn(w)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	inherited, err := systemdSockets(log)
	if err != nil {
		log.WithError(err).Error("vigil cannot start")
		return exitFail
	}
	d, err := newDaemon(ctx, cfg, log, Options{Inherited: inherited})
	if err != nil {
		// Exit at once with the reason: systemd restarts vigil and the
		// journal shows why, instead of a half-started daemon.
		log.WithError(err).Error("vigil cannot start")
		return exitFail
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				notifyReloading()
				d.reload(f.Config, f.DryRun)
				notify(sd.SdNotifyReady)
			}
		}
	}()
	if err := d.run(ctx); err != nil {
		log.WithError(err).Error("vigil stopped on an error")
		return exitFail
	}
	return exitOK
}

// LoadConfig is the one way `vigil run`, its SIGHUP reload and
// `vigil check-config` read a config: whatever check-config accepts, run
// starts with, and the reverse. dryRun is run's --dry-run flag.
func LoadConfig(path string, dryRun bool) (*configs.Config, error) {
	cfg, err := configs.Load(path)
	if err != nil {
		return nil, err
	}
	if dryRun {
		cfg.Watchdog.DryRun = true
	}
	return cfg, nil
}

// LimiterSummary is the limiter's setting in a few words, for the
// start-up log and check-config.
func LimiterSummary(a configs.Admission) string {
	if !a.Enabled {
		return "off"
	}
	capacity := "automatic cap"
	if a.MaxInFlight > 0 {
		capacity = fmt.Sprintf("cap %d", a.MaxInFlight)
	}
	return fmt.Sprintf("on %s, %s", a.Listen, capacity)
}

// Options lets the demo and tests swap the clock-free parts.
type Options struct {
	// Notifier replaces the notifier the config names (the demo logs).
	Notifier alerts.Notifier
	// Registry replaces a fresh registry.
	Registry *prometheus.Registry
	// NoStatus skips vigil's own listener.
	NoStatus bool
	// Inherited are listening sockets handed over by name ("admission",
	// "status"), as systemd socket activation passes them: used instead of
	// binding, so the socket and its backlog outlive vigil's own restart.
	Inherited map[string]net.Listener
	// Drainer and Restarter replace the ones load_balancer.kind and
	// restart.kind build: the demo's in-memory load balancer, and its
	// restart of the in-process simulated engine.
	Drainer   balancer.Drainer
	Restarter restarter.Restarter
	// RecoveryPoll, when set, is how often recovery reads the drain and
	// the engine's readiness (the demo's engine runs ten times the wall
	// clock, so the default poll would be most of a recovery).
	RecoveryPoll time.Duration
	// OnCycle, when set, also sees every verdict, after the daemon's own
	// end of cycle (the demo narrates them).
	OnCycle func(watchdog.Verdict)
}

// daemon is every part of `vigil run`, wired.
type daemon struct {
	log      *logrus.Entry
	registry *prometheus.Registry
	store    *state.Store

	// mu guards cfg, loadedAt and pending: the reload writes them, the
	// status handlers read them.
	mu  sync.Mutex
	cfg *configs.Config

	pager   *alerts.Pager
	digest  *alerts.Digest
	limiter *admission.Limiter // nil when admission is off
	// pauses measures vigil's own pauses, once for the process: the
	// limiter's stall watch and the watchdog's HUNG both discount them.
	pauses    *pausemeter.Meter
	recovery  *recoverer.Recovery
	restarter restarter.Restarter
	watchdog  *watchdog.Watchdog
	overrides *overrides.Manager
	status    *status.Server
	cron      *cron.Cron
	pool      poolCache
	members   poolMembers       // the etcd directory (pool.coordination etcd)
	affinity  *routing.Affinity // nil without a coalescing limiter
	turns     *coord.Semaphore  // nil without pool.coordination etcd
	readyOnce sync.Once
	lastSent  uint64
	onCycleFn func(watchdog.Verdict) // Options.OnCycle

	// stateFault says why the state file cannot be written ("" when it
	// can): paged at start, shown on /status.
	stateFault string

	// Listeners are bound in newDaemon, before anything runs, so a taken
	// port fails the start instead of leaving the rest running.
	admissionLn net.Listener
	statusLn    net.Listener
	// lbServer is the drainer when the balancer polls vigil (healthcheck,
	// agent): its listener is bound in newDaemon too.
	lbServer balancer.Server
	// soft lowers this node's weight while the limiter suspects a stall
	// (set after the limiter is built: suspicionHook reads it).
	soft atomic.Pointer[softDrain]

	// thMu serializes read-modify-write of the watchdog's thresholds
	// (reload and overrides both change them).
	thMu sync.Mutex
	// reloadMu serializes reloads; loadedAt and pending (under mu)
	// describe the last.
	reloadMu sync.Mutex
	loadedAt time.Time
	pending  []string // keys whose file value waits for a restart

	// started is when this vigil started, for the status page's uptime.
	started time.Time
}

// newDaemon builds and wires every part and binds the listeners; nothing
// runs until run. Any part that cannot start is an error naming its
// setting, and whatever was built is released. The order matters: the
// pager first (the others report to it), the limiter before the recovery
// and the watchdog (both drive it), the overrides after what they change,
// the listeners last.
func newDaemon(ctx context.Context, cfg *configs.Config, log *logrus.Entry, o Options) (_ *daemon, err error) {
	d := &daemon{log: log, cfg: cfg, registry: o.Registry, loadedAt: time.Now(), started: time.Now(), onCycleFn: o.OnCycle}
	defer func() {
		if err != nil {
			d.release()
		}
	}()
	if d.registry == nil {
		d.registry = prometheus.NewRegistry()
		d.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if err := d.openState(cfg); err != nil {
		return nil, err
	}
	if err := d.buildPager(ctx, cfg, o.Notifier); err != nil {
		return nil, err
	}
	// Which engine: with engine.kind auto, one scrape now so the limiter
	// and the watchdog read the right names from the start.
	ek := ResolveEngineKind(ctx, cfg.Engine)
	log.WithField("engine_kind", ek.Kind).Info("engine kind: " + ek.Words)
	// One engine reader for the limiter and the watchdog: they read the
	// same series by the same profile, and with engine.kind still auto the
	// first readable scrape decides for both.
	reader := probes.NewReader(ek.Engine.Metrics, ek.Engine.Kind, cfg.Engine.MetricsFor)
	d.pauses = pausemeter.New(pausemeter.Wall, pausemeter.Config{})
	d.pauses.Start()
	if err := d.buildLimiter(cfg, reader); err != nil {
		return nil, err
	}
	if err := d.buildRecovery(cfg, o); err != nil {
		return nil, err
	}
	if err := d.buildWatchdog(ctx, cfg, ek.Engine, reader); err != nil {
		return nil, err
	}
	if err := d.buildSchedules(cfg); err != nil {
		return nil, err
	}
	if !o.NoStatus && cfg.Status.Listen != "" {
		d.status = status.New(status.Options{
			Listen: cfg.Status.Listen, AllowRemote: cfg.Status.AllowRemote, Gatherer: d.registry, Snapshot: d.snapshot,
			Overrides: d.overrides, Log: log.WithField("part", "status"),
		})
	}
	if err := d.bindListeners(cfg, o.Inherited); err != nil {
		return nil, err
	}
	return d, nil
}

// openState opens the state file. One that cannot be written is a fault
// the daemon runs with (stateFault), not a failed start: vigil sits in
// the data path, and a state directory it cannot write must not take the
// proxy down with it. Every journaled step (a restart) refuses on this
// store; the watchdog still judges and pages, and the first page says why
// nothing will be restarted.
func (d *daemon) openState(cfg *configs.Config) error {
	var err error
	if d.store, err = state.Open(cfg.Watchdog.StateFile); err != nil {
		if !errors.Is(err, state.ErrNotWritable) {
			return fmt.Errorf("%w (watchdog.state_file)", err)
		}
		d.stateFault = fmt.Sprintf("%v (watchdog.state_file)", err)
		d.log.WithError(err).Error("vigil: the state file cannot be written: the limiter serves and verdicts are paged, but no recovery can run until it can")
	}
	return nil
}

// buildPager builds the pager over the config's notifier, or over
// notifier when the caller brings one (the demo's terminal).
func (d *daemon) buildPager(ctx context.Context, cfg *configs.Config, notifier alerts.Notifier) error {
	log := d.log.WithField("part", "alerts")
	if notifier == nil {
		var err error
		// A notifier that cannot work (e.g. a token Slack refuses) fails
		// the start: pages are how a human learns of a hang.
		if notifier, err = alerts.NewNotifier(cfg.Alerts, log, nil); err != nil {
			return fmt.Errorf("alerts (kind %s): %w", cfg.Alerts.Kind, err)
		}
		// A rejected Slack token stops the start; Slack unreachable only warns.
		if err = alerts.CheckNotifier(ctx, notifier, log, 20*time.Second); err != nil {
			return err
		}
	}
	po := alerts.OptionsFromConfig(*cfg)
	po.Store, po.Log, po.Registerer = d.store, log, d.registry
	po.Pool = d.poolLine
	po.Outlook = func() *recovery.Refusal { return d.recovery.Outlook() } // nil-safe; built later
	var err error
	if d.pager, err = alerts.NewPager(notifier, po); err != nil {
		return err
	}
	d.digest = alerts.NewDigest(nil)
	return nil
}

// buildLimiter builds the admission limiter (none with admission off)
// and, with coalescing, the routing share it feeds.
func (d *daemon) buildLimiter(cfg *configs.Config, reader *probes.Reader) error {
	if !cfg.Admission.Enabled {
		return nil
	}
	upstream, err := url.Parse(cfg.Engine.URL)
	if err != nil {
		return fmt.Errorf("engine.url: %w", err)
	}
	d.limiter, err = admission.New(cfg.Admission, upstream, cfg.Engine.APIKey,
		admission.WithLogger(d.log.WithField("part", "admission")),
		admission.WithRegisterer(d.registry),
		admission.WithEngineReader(reader),
		admission.WithNode(cfg.Node), admission.WithPeers(d.movePeers),
		admission.WithSuspicionHook(d.suspicionHook),
		admission.WithLearnedStore(d.store), admission.WithPauses(d.pauses))
	if err != nil {
		return err
	}
	if cfg.Admission.Coalesce {
		d.affinity = routing.NewAffinity(routing.AffinityOptions{})
		d.registry.MustRegister(d.affinity.Collectors()...)
	}
	return nil
}

// buildRecovery builds the recovery (drain, restart, wait ready,
// restore) over the configured load balancer and restarter, or the
// caller's (the demo's), with the pool's turns and floor.
func (d *daemon) buildRecovery(cfg *configs.Config, o Options) error {
	var err error
	drainer := o.Drainer
	if drainer == nil {
		if drainer, err = balancer.NewDrainer(cfg.LoadBalancer); err != nil {
			return err
		}
	}
	d.lbServer, _ = drainer.(balancer.Server)
	d.soft.Store(&softDrain{drainer: drainer, dryRun: cfg.Watchdog.DryRun, log: d.log.WithField("part", "admission")})
	if d.restarter = o.Restarter; d.restarter == nil {
		if d.restarter, err = restarter.New(cfg.Restart, nil); err != nil {
			return err
		}
	}
	ro := recoverer.Options{
		LoadBalancer: cfg.LoadBalancer, Restart: cfg.Restart, StartupGrace: cfg.Watchdog.StartupGrace, Unwritable: d.stateFault,
		Drainer: drainer, Restarter: d.restarter, Ready: readyCheck(cfg),
		Store: d.store, Reporter: d.fanout(), DryRun: cfg.Watchdog.DryRun, PeerDrained: d.peerDrained,
		Registerer: d.registry, Log: d.log.WithField("part", "recovery"),
		DrainPoll: o.RecoveryPoll, ReadyPoll: o.RecoveryPoll,
	}
	if d.limiter != nil {
		ro.Limiter = d.limiter
		ro.Calls = d.callFate
	}
	if err := d.wirePool(cfg, &ro); err != nil {
		return err
	}
	d.recovery, err = recoverer.New(ro)
	return err
}

// buildWatchdog builds the watchdog's loop over the engine and the
// parts it reports to and drives.
func (d *daemon) buildWatchdog(ctx context.Context, cfg *configs.Config, engine configs.Engine, reader *probes.Reader) error {
	wo := watchdog.Options{
		Engine: engine, Reader: reader, Watchdog: cfg.Watchdog, UnknownAfter: cfg.Alerts.UnknownAfter, CalmFor: cfg.Alerts.ResolveAfter, Node: cfg.Node,
		Pager: d.fanout(), Recoverer: d.recovery, Store: d.store,
		Log: d.log.WithField("part", "watchdog"), Registerer: d.registry,
		OnCycle: d.onCycle, Notice: d.notice, Conditions: d.pager,
		Paused: d.pauses.Paused,
	}
	if d.limiter != nil {
		wo.Limiter = d.limiter
		wo.MaxInFlight = cfg.Admission.MaxInFlight
		wo.LimiterLoad = d.limiterLoad
	}
	if st, err := d.restarter.Status(ctx); err == nil && st.Known {
		wo.EngineStarted = st.StartedAt
	}
	var err error
	d.watchdog, err = watchdog.New(wo)
	return err
}

// buildSchedules builds what runs on the clock: the overrides' expiry
// (they need the live values, so they come after the limiter and the
// watchdog) and the daily digest.
func (d *daemon) buildSchedules(cfg *configs.Config) error {
	var err error
	if d.overrides, err = overrides.New(overrides.Options{
		Applier: liveSettings{d}, Notifier: noticeFunc(d.notice), Store: d.store,
		Log: d.log.WithField("part", "overrides"), Registerer: d.registry,
	}); err != nil {
		return err
	}
	if err := d.overrides.Resume(cfg.Overrides); err != nil {
		d.log.WithError(err).Warn("some overrides in the config were not applied")
	}
	d.cron = cron.New(cron.WithChain(cron.Recover(cronlog.New(d.log)), cron.SkipIfStillRunning(cronlog.New(d.log))),
		cron.WithLogger(cronlog.New(d.log)))
	if cfg.Alerts.Digest != "" {
		if _, err := d.cron.AddFunc(cfg.Alerts.Digest, d.sendDigest); err != nil {
			return fmt.Errorf("alerts.digest: %w", err)
		}
	}
	return nil
}

// bindListeners binds last, once everything else has been built, and
// before anything runs, so a taken port fails the start.
func (d *daemon) bindListeners(cfg *configs.Config, inherited map[string]net.Listener) error {
	var err error
	if d.limiter != nil {
		if d.admissionLn, err = bind(inherited["admission"], "admission.listen", cfg.Admission.Listen); err != nil {
			return err
		}
	}
	if d.status != nil {
		if d.statusLn, err = bind(inherited["status"], "status.listen", cfg.Status.Listen); err != nil {
			return err
		}
	}
	return nil
}

// bind uses the socket systemd handed over when there is one (it must be
// on the configured address: two sources of truth that disagree are a
// start-up error naming both), and listens on addr otherwise.
func bind(inherited net.Listener, setting, addr string) (net.Listener, error) {
	if inherited == nil {
		return listen(setting, addr)
	}
	want, err := net.ResolveTCPAddr("tcp", addr)
	got, ok := inherited.Addr().(*net.TCPAddr)
	if err != nil || !ok || !got.IP.Equal(want.IP) || got.Port != want.Port {
		return nil, fmt.Errorf("%s %s: systemd passed a socket on %s instead (vigil.socket's ListenStream): make them the same",
			setting, addr, inherited.Addr())
	}
	return inherited, nil
}

// listen binds addr for the setting that names it; the error says which
// setting, which address and why ("status.listen 127.0.0.1:9108: cannot
// listen: bind: address already in use").
func listen(setting, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		var oe *net.OpError
		if errors.As(err, &oe) {
			err = oe.Err
		}
		return nil, fmt.Errorf("%s %s: cannot listen: %w", setting, addr, err)
	}
	return ln, nil
}

// release frees what a newDaemon that failed half-way had built.
func (d *daemon) release() {
	for _, ln := range []net.Listener{d.admissionLn, d.statusLn} {
		if ln != nil {
			ln.Close()
		}
	}
	if d.limiter != nil {
		d.limiter.Close()
	}
	if d.pauses != nil {
		d.pauses.Close()
	}
	if c, ok := d.restarter.(io.Closer); ok {
		c.Close()
	}
	if d.lbServer != nil {
		d.lbServer.Close()
	}
	if d.turns != nil {
		_ = d.turns.Close()
	}
}

// run starts every part and blocks until ctx ends, then stops them in
// order: the loop first, so no new action starts, then the listeners,
// then the pager gets a moment to flush.
func (d *daemon) run(ctx context.Context) error {
	cfg := d.config()
	d.log.WithFields(logrus.Fields{
		"engine": cfg.Engine.URL, "node": cfg.Node, "dry_run": cfg.Watchdog.DryRun,
		"interval_seconds": cfg.Watchdog.Interval.Seconds(), "hang_after": cfg.Watchdog.HangAfter.String(),
		"limiter": LimiterSummary(cfg.Admission), "load_balancer": cfg.LoadBalancer.Kind, "restart": cfg.Restart.Kind,
		"alerts": cfg.Alerts.Kind, "state_file": cfg.Watchdog.StateFile, "version": version,
		"gomaxprocs": runtime.GOMAXPROCS(0),
	}).Info("vigil starting")

	// Every long-lived part runs under one supervisor: the first to fail
	// (an error, a panic, or a return before the end) stops them all, and
	// run returns that failure, so `vigil run` exits non-zero.
	sup := newSupervisor(ctx, d.log)
	pagerCtx, stopPager := context.WithCancel(context.Background())
	defer stopPager()
	// The pager outlives the others by a flush; its context is its own.
	sup.Go("alerts pager", untilStopped, func(context.Context) error { return d.pager.Run(pagerCtx) })
	noProxy := make(chan struct{})
	close(noProxy)
	served := (<-chan struct{})(noProxy)
	if d.limiter != nil {
		served = sup.Go("admission.listen "+cfg.Admission.Listen, untilStopped, func(ctx context.Context) error {
			return d.limiter.Serve(ctx, d.admissionLn)
		})
	}
	if d.status != nil {
		sup.Go("status.listen "+cfg.Status.Listen, untilStopped, func(ctx context.Context) error {
			return d.status.Serve(ctx, d.statusLn)
		})
	}
	if d.lbServer != nil {
		// A host the journal says vigil left drained stays out from the
		// first poll; the resumed recovery takes it from there.
		if d.recovery.Snapshot().Drained {
			d.lbServer.StartDrained()
		}
		sup.Go("load_balancer."+cfg.LoadBalancer.Kind+" "+d.lbServer.String(), untilStopped, d.lbServer.Serve)
	}
	sup.Go("overrides expiry", untilStopped, func(ctx context.Context) error { d.overrides.Run(ctx); return nil })
	d.startPoolMembers(sup, cfg)
	if hasPool(cfg) {
		sup.Go("pool view", untilStopped, func(ctx context.Context) error { d.refreshPool(ctx); return nil })
	}
	if d.affinity != nil {
		sup.Go("routing share", untilStopped, func(ctx context.Context) error { d.watchAffinity(ctx); return nil })
	}
	d.cron.Start()

	if d.stateFault != "" {
		d.notice("state_unwritable", "STATE NOT WRITABLE, RESTARTS REFUSED: "+d.stateFault+
			"; the limiter serves and verdicts are paged, but vigil will not drain or restart the engine until the state file can be written (check the directory's owner, permissions and free space)")
	}
	// A recovery that was in progress when vigil stopped goes on first.
	if err := d.recovery.Resume(sup.Context()); err != nil {
		d.log.WithError(err).Error("cannot resume the recovery in the journal")
	}
	loopDone := sup.Go("watchdog loop", untilStopped, d.watchdog.Run)

	<-sup.Context().Done()
	runErr := sup.Err()
	notify(sd.SdNotifyStopping)
	l := d.log
	if runErr != nil {
		l = l.WithError(runErr)
	}
	l.Info("vigil stopping")
	// The loop first, so no new action starts.
	<-loopDone
	<-d.cron.Stop().Done()
	// Each recovery step was journaled before it ran: the next vigil
	// resumes it. Give the step in flight a moment to finish cleanly.
	waitTimeout(d.recovery.Wait, 5*time.Second)
	// The proxy drains its requests in flight (shutdown_grace) before its
	// executions are cancelled.
	<-served
	if d.limiter != nil {
		d.limiter.Close()
	}
	d.pauses.Close()
	d.closePool()
	flushCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := d.pager.Flush(flushCtx); err != nil {
		d.log.WithField("queued", d.pager.Queued()).Warn("pages still queued at exit; they are in the state file and go out on the next start")
	}
	cancel()
	stopPager()
	sup.Wait()
	if c, ok := d.restarter.(io.Closer); ok {
		c.Close()
	}
	if d.lbServer != nil {
		d.lbServer.Close()
	}
	return runErr
}

// onCycle runs at the end of every watchdog cycle, from the loop itself:
// READY=1 once, then WATCHDOG=1 every cycle, so a wedged loop stops the
// heartbeat and systemd restarts vigil.
func (d *daemon) onCycle(v watchdog.Verdict) {
	d.readyOnce.Do(func() {
		notify(sd.SdNotifyReady)
		d.log.WithField("state", string(v.State)).Info("first sample taken; ready")
	})
	notify(sd.SdNotifyWatchdog)
	notifyStatus(fmt.Sprintf("%s: %s", v.State, v.Reason))
	if d.onCycleFn != nil {
		d.onCycleFn(v)
	}
}

// notice pages a standalone message (overrides, the retry-storm alarm,
// the digest) and logs it.
func (d *daemon) notice(kind, text string) {
	d.log.WithField("kind", kind).Warn(text)
	d.pager.Notice(kind, text)
}

type noticeFunc func(kind, text string)

func (f noticeFunc) Notice(kind, text string) { f(kind, text) }

func (d *daemon) sendDigest() {
	var in []string
	for _, o := range d.overrides.List() {
		in = append(in, fmt.Sprintf("%s=%s until %s (%s)", o.Key, o.Value, o.Until.UTC().Format("Jan 2 15:04 MST"), o.Reason))
	}
	sent := d.pager.Sent()
	text := d.digest.Report(d.config().Node, sent-d.lastSent, in)
	d.lastSent = sent
	d.pager.Notice("digest", text)
}

// fanout sends verdicts and recovery steps to the pager and the digest.
func (d *daemon) fanout() tee { return tee{d.pager, d.digest} }

type tee struct {
	pager  *alerts.Pager
	digest *alerts.Digest
}

func (t tee) Observe(v watchdog.Verdict, inc *watchdog.Incident) {
	t.digest.Observe(v, inc)
	t.pager.Observe(v, inc)
}

func (t tee) RecoveryStep(s recovery.Step) {
	t.digest.RecoveryStep(s)
	t.pager.RecoveryStep(s)
}

func (d *daemon) config() *configs.Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg
}

// readyCheck is recovery's "serves again": /v1/models 200 and a 1-token
// completion that completes.
func readyCheck(cfg *configs.Config) func(ctx context.Context) error {
	// One transport for every check: recovery polls this every few seconds
	// for up to ready_timeout, and a transport per call would leave its
	// idle connections behind each time.
	pc := probes.FromConfig(cfg.Engine, cfg.Watchdog)
	return func(ctx context.Context) error {
		c := probes.NewClient(pc)
		defer c.Close()
		m := c.Models(ctx)
		if !m.OK() {
			return fmt.Errorf("/v1/models: %s", m)
		}
		model := cfg.Engine.Model
		if model == "" {
			model = m.First()
		}
		c.StartCompletion(model)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			s := c.PollCompletion()
			switch s.State {
			case probes.ProbeOK:
				return nil
			case probes.ProbeTimedOut:
				// /v1/models answered: the engine is up and not completing.
				return recoverer.Stuck(fmt.Errorf("completion probe: %s", s))
			case probes.ProbeFailed:
				return fmt.Errorf("completion probe: %s", s)
			}
			select {
			case <-ctx.Done():
				return recoverer.Stuck(fmt.Errorf("completion probe still outstanding: %w", ctx.Err()))
			case <-t.C:
			}
		}
	}
}

func newLogger(w io.Writer, level string, asJSON bool) (*logrus.Entry, error) {
	l := logrus.New()
	l.SetOutput(w)
	lv, err := logrus.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	l.SetLevel(lv)
	if asJSON {
		l.SetFormatter(&logrus.JSONFormatter{})
	} else {
		l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, DisableColors: true})
	}
	return logrus.NewEntry(l), nil
}

func waitTimeout(wait func(), d time.Duration) bool {
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

var errNoLimiter = errors.New("the admission limiter is off (admission.enabled: false)")

// limiterLoad is the limiter's side of the load, for the watchdog.
func (d *daemon) limiterLoad() watchdog.LimiterLoad { return watchdog.LimiterLoad(d.limiter.Load()) }

// callFate is what became of the calls the limiter cut from the lost
// engine, and how many it holds for the engine now (cut and waiting, or
// queued).
func (d *daemon) callFate() (recovery.CallFate, int) {
	f, held := d.limiter.RequestFate()
	return f, held + d.limiter.Stats().QueueDepth
}
