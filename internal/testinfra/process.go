package testinfra

import (
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

// start runs d (killed with the test binary if that dies), registers its
// stop, and waits until it is ready; a server that cannot start or exits
// first is unavailable (a skip, or a failure under d.env=1), with the
// tail of its log. It returns the channel that yields its exit.
func (d daemon) start(t testing.TB) chan error {
	t.Helper()
	logf, err := os.Create(d.logPath)
	if err != nil {
		t.Fatalf("testinfra: %v", err)
	}
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		logf.Close()
		Unavailable(t, d.what, d.env, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- d.cmd.Wait(); logf.Close() }()
	t.Cleanup(func() { d.stop(d.cmd, exited) })
	deadline := time.Now().Add(d.within)
	for {
		err := d.ready()
		if err == nil {
			return exited
		}
		select {
		case werr := <-exited:
			exited <- werr
			log, _ := os.ReadFile(d.logPath)
			Unavailable(t, d.what, d.env, fmt.Errorf("%s exited (%v): %s", d.cmd.Path, werr, tail(log)))
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(d.logPath)
			Unavailable(t, d.what, d.env, fmt.Errorf("not ready after %v (%v): %s", d.within, err, tail(log)))
		}
		time.Sleep(d.poll)
	}
}
