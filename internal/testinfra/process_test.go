package testinfra

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// run, the part of a daemon's start a bench main uses too, says why a
// server never came up and leaves no process behind.
func TestDaemonRunSaysWhyAServerNeverCameUp(t *testing.T) {
	never := func() error { return errors.New("not yet") }
	for _, tc := range []struct {
		name string
		argv []string
		want string
	}{
		{"exits first", []string{"sh", "-c", "echo boom; exit 3"}, "exited (exit status 3): boom"},
		{"never ready", []string{"sleep", "30"}, "not ready after 200ms (not yet)"},
		{"cannot start", []string{filepath.Join(t.TempDir(), "no-such-server")}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(tc.argv[0], tc.argv[1:]...)
			d := daemon{what: "TEST", env: "VIGIL_REQUIRE_TEST", cmd: cmd, logPath: filepath.Join(t.TempDir(), "log"),
				within: 200 * time.Millisecond, poll: 10 * time.Millisecond, ready: never, stop: kill}
			exited, err := d.run()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run: %v, want an error with %q", err, tc.want)
			}
			if errors.Is(err, errSetup) {
				t.Errorf("run: %v is the server's failure, not testinfra's set-up", err)
			}
			if exited != nil {
				select {
				case e := <-exited:
					exited <- e
				case <-time.After(5 * time.Second):
					t.Fatal("the server still runs after run gave up on it")
				}
			}
		})
	}
	d := daemon{cmd: exec.Command("true"), logPath: filepath.Join(t.TempDir(), "no-dir", "log"), ready: never, stop: kill}
	if _, err := d.run(); !errors.Is(err, errSetup) {
		t.Errorf("a log file that cannot be made: %v, want testinfra's set-up error", err)
	}
}
