package testinfra

import (
	"strings"
	"testing"
)

// RunStartCounter runs a busybox container that appends a line to
// /starts each time it starts, so a test can count a restarter's
// restarts exactly (Starts).
func (d *Dockerd) RunStartCounter(t testing.TB, name string) {
	t.Helper()
	d.ImportBusybox(t, "vigil-test/busybox:1")
	d.RunContainer(t, Container{
		Name: name, Image: "vigil-test/busybox:1", StopSignal: "SIGKILL",
		Cmd: []string{"/bin/sh", "-c", "date +%s.%N >> /starts; exec sleep 100000"},
	})
}

// Starts is how many times a RunStartCounter container started.
func (d *Dockerd) Starts(t testing.TB, name string) int {
	t.Helper()
	out := d.CLI(t, "exec", name, "/bin/busybox", "cat", "/starts")
	return len(strings.Fields(out))
}
