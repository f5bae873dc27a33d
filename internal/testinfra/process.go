package testinfra

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// daemon is a server process a test starts (etcd, HAProxy) and how to
// tell it is ready and to stop it.
type daemon struct {
	what, env string // "ETCD", RequireEtcdEnv: named when it cannot run
	cmd       *exec.Cmd
	logPath   string        // its stdout and stderr
	within    time.Duration // how long it may take to be ready
	poll      time.Duration
	// ready reports nil once the server answers; its last error is named
	// if it never does.
	ready func() error
	// stop ends the process at the test's end; exited yields its exit
	// (and must be given back for a later stop).
	stop func(cmd *exec.Cmd, exited chan error)
}

// errSetup marks a failure of testinfra's own set-up (a file it could not
// create, no free port): a broken test machine, not a missing real part,
// so a test fails on it rather than skipping.
var errSetup = errors.New("testinfra")

// start runs d, registers its stop at the test's end, and returns the
// channel that yields its exit; a server that cannot start, exits first or
// is never ready is unavailable (a skip, or a failure under d.env=1).
func (d daemon) start(t testing.TB) chan error {
	t.Helper()
	exited, err := d.run()
	if err != nil {
		giveUp(t, d.what, d.env, err)
	}
	t.Cleanup(func() { d.stop(d.cmd, exited) })
	return exited
}

// run starts d (killed with this process if it dies) and waits until it
// is ready. It returns the channel that yields d's exit (nil if d never
// started) and, when d cannot start, exits first or is not ready within
// d.within, an error with the tail of its log; d is stopped by then.
func (d daemon) run() (chan error, error) {
	logf, err := os.Create(d.logPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errSetup, err)
	}
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- d.cmd.Wait(); logf.Close() }()
	deadline := time.Now().Add(d.within)
	for {
		err := d.ready()
		if err == nil {
			return exited, nil
		}
		select {
		case werr := <-exited:
			exited <- werr
			log, _ := os.ReadFile(d.logPath)
			return exited, fmt.Errorf("%s exited (%v): %s", d.cmd.Path, werr, tail(log))
		default:
		}
		if time.Now().After(deadline) {
			d.stop(d.cmd, exited)
			log, _ := os.ReadFile(d.logPath)
			return exited, fmt.Errorf("not ready after %v (%v): %s", d.within, err, tail(log))
		}
		time.Sleep(d.poll)
	}
}

// giveUp ends a test whose real part what could not be had: a failure for
// testinfra's own set-up, else the require rule (Unavailable).
func giveUp(t testing.TB, what, env string, err error) {
	t.Helper()
	if errors.Is(err, errSetup) {
		t.Fatalf("%v", err)
	}
	Unavailable(t, what, env, err)
}

// terminate asks cmd to stop (SIGTERM) and waits for exited to close;
// SIGKILL if it has not within grace.
func terminate(cmd *exec.Cmd, exited <-chan struct{}, grace time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-exited
	}
}
