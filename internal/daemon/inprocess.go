package daemon

import (
	"context"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/admission"
	"github.com/vigil-dev/vigil/alerts"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/recoverer"
	"github.com/vigil-dev/vigil/watchdog"
)

// Daemon is the daemon `vigil run` runs, built by the same constructor,
// for a program that runs it in process with parts of its own (the demo:
// a simulated load balancer and engine restart). It lives outside the
// demo so that the daemon's binary need not link the simulation.
type Daemon struct{ d *daemon }

// New builds and wires every part and binds the listeners, as
// `vigil run` does; nothing runs until Run.
func New(ctx context.Context, cfg *configs.Config, log *logrus.Entry, o Options) (*Daemon, error) {
	d, err := newDaemon(ctx, cfg, log, o)
	if err != nil {
		return nil, err
	}
	return &Daemon{d}, nil
}

// Run runs every part until ctx ends or one fails, then stops them all.
func (d *Daemon) Run(ctx context.Context) error { return d.d.run(ctx) }

// AdmissionAddr is where the limiter listens ("" with admission off).
func (d *Daemon) AdmissionAddr() string {
	if d.d.admissionLn == nil {
		return ""
	}
	return d.d.admissionLn.Addr().String()
}

// StatusAddr is where /status and /metrics listen ("" without).
func (d *Daemon) StatusAddr() string {
	if d.d.statusLn == nil {
		return ""
	}
	return d.d.statusLn.Addr().String()
}

// Limiter is the admission limiter (nil with admission off).
func (d *Daemon) Limiter() *admission.Limiter { return d.d.limiter }

// Watchdog is the watchdog's loop.
func (d *Daemon) Watchdog() *watchdog.Watchdog { return d.d.watchdog }

// Recovery is the recovery sequence.
func (d *Daemon) Recovery() *recoverer.Recovery { return d.d.recovery }

// Pager is the pager.
func (d *Daemon) Pager() *alerts.Pager { return d.d.pager }
