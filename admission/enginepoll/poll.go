package enginepoll

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/admission/core"
	"github.com/vigil-dev/vigil/probes"
)

const (
	// pollEvery is how often the engine's queue gauges are read while
	// requests are in flight under the automatic cap.
	pollEvery = 250 * time.Millisecond
	// pollRetry is the longest pause after failed reads, so an engine
	// without readable metrics is not asked four times a second. The
	// pauses grow to it from pollFirstRetry (retryAfter): a real
	// llama-server under a burst once let one read time out, and ten
	// seconds without readings let the automatic cap drift far above its
	// slots.
	pollRetry      = 10 * time.Second
	pollFirstRetry = time.Second
	// readTimeout bounds one read; /metrics answers even when the engine
	// core is hung.
	readTimeout = 2 * time.Second
)

// Cap is what the poll feeds (package core's Limiter).
type Cap interface {
	// ReadsEngine: the cap wants the engine's load now (requests in
	// flight; an idle engine is left alone).
	ReadsEngine() bool
	ObserveEngine(core.EngineLoad)
	// SetEngineSeats hands over the seat limit the engine exposes.
	SetEngineSeats(n int)
}

// Poller reads one engine for one limiter. Build it with New.
type Poller struct {
	reader *probes.Reader
	// engine is the engine's API (its /metrics, and llama.cpp's /slots),
	// over the limiter's own connections.
	engine probes.Target
	cap    Cap
	clock  core.Clock
	log    *logrus.Entry
	seats  probes.Seats
}

// New reads engine through reader (the watchdog's, so both read the engine
// by its profile: vLLM's, SGLang's, llama.cpp's names, or engine.metrics)
// and feeds cap, keeping time by clock.
func New(reader *probes.Reader, engine probes.Target, cap Cap, clock core.Clock, log *logrus.Entry) *Poller {
	return &Poller{reader: reader, engine: engine, cap: cap, clock: clock, log: log}
}

// Read reads the engine's load once: the queue gauges summed over their
// label sets (data-parallel engines report one per engine), with the
// series that tell a prefill backlog from a full engine.
func (p *Poller) Read(ctx context.Context) (core.EngineLoad, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	ld, err := p.reader.Read(ctx, p.engine)
	if err != nil {
		return core.EngineLoad{}, fmt.Errorf("admission: read engine metrics: %w", err)
	}
	return core.EngineLoad{Waiting: ld.Waiting, Running: ld.Running, KVUsage: ld.KVUsage,
		PromptTokens: ld.PromptTokens, FirstTokens: ld.FirstTokens, CachedTokens: ld.CachedTokens}, nil
}

// Run feeds the engine's load to the cap while the cap wants it, until ctx
// ends. It keeps time by the clock, like every other interval of the
// limiter, so the poll keeps its proportion to the engine's time.
func (p *Poller) Run(ctx context.Context) {
	tick := make(chan struct{}, 1)
	wait := pollEvery
	failures := 0
	for {
		if !core.Sleep(ctx, p.clock, wait, tick) {
			return
		}
		wait = pollEvery
		if !p.cap.ReadsEngine() {
			continue
		}
		g, err := p.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			wait = retryAfter(failures)
			if failures == 1 {
				p.log.WithError(err).WithField("retry_seconds", wait.Seconds()).
					Warn("admission: cannot read the engine's queue; the automatic cap falls back to TTFT and failures")
			}
			continue
		}
		if failures > 0 {
			p.log.Info("admission: reading the engine's queue again")
			failures = 0
		}
		p.cap.ObserveEngine(g)
		p.readSeats(ctx)
	}
}

// retryAfter is the pause after the n-th failed read in a row (n >= 1):
// pollFirstRetry, doubling up to pollRetry. One read lost to a busy engine
// costs a second of readings; an engine whose metrics stay unreadable is
// asked every pollRetry.
func retryAfter(n int) time.Duration {
	d := pollFirstRetry
	for i := 1; i < n && d < pollRetry; i++ {
		d *= 2
	}
	return min(d, pollRetry)
}

// ResetSeats has the seats read again: the engine restarted, and the
// restarted one may have others.
func (p *Poller) ResetSeats() { p.seats.Reset() }

// readSeats reads, once per engine start (probes.Seats), the seat limit
// the engine exposes and hands it to the cap (core.Limiter.SetEngineSeats).
// Every request past llama.cpp's slots waits in its own queue, so they are
// the cap's ceiling and its best start; the queue gauges alone, read four
// times a second, let the cap saw between one and three times the slots
// (issue 38). Called by the poll loop once the reader knows the engine's
// kind.
func (p *Poller) readSeats(ctx context.Context) {
	if !p.seats.Due(p.reader.Kind()) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	n, err := p.seats.Read(ctx, p.engine)
	switch {
	case err != nil:
		p.log.WithError(err).Warn("admission: cannot read the engine's slots; the automatic cap reads its queue alone")
	case n > 0:
		p.cap.SetEngineSeats(n)
	}
}
