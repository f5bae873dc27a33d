package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
)

// demoBinary is the demo's own binary (cmd/vigil-demo). The demo runs a
// simulated engine and simulated clients, which vigil's binary, running
// on every GPU node, should not carry; `vigil demo` runs that binary.
const demoBinary = "vigil-demo"

// demoSource is where the demo's source is, from a source tree's root.
const demoSource = "./cmd/" + demoBinary

// runDemo is `vigil demo`: it runs vigil-demo with the same arguments,
// on the same terminal, and exits with its exit code.
func runDemo(args []string, stdout, stderr io.Writer) int {
	self, _ := os.Executable()
	argv, err := demoCommand(self, exec.LookPath, isDir)
	if err != nil {
		fmt.Fprintf(stderr, "vigil demo: %v\n", err)
		return exitFail
	}
	cmd := exec.Command(argv[0], append(argv[1:], args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	// Ctrl-C reaches the demo from the terminal; a signal sent to vigil
	// alone is passed on, and vigil waits for the demo to end either way.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "vigil demo: %v\n", err)
		return exitFail
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case err := <-done:
			var ee *exec.ExitError
			switch {
			case err == nil:
				return exitOK
			case errors.As(err, &ee) && ee.ExitCode() > 0:
				return ee.ExitCode()
			default:
				fmt.Fprintf(stderr, "vigil demo: %s: %v\n", argv[0], err)
				return exitFail
			}
		}
	}
}

// demoCommand is how to run the demo, first found wins, and only where
// a package or `go run` puts it:
//   - vigil-demo beside vigil's own executable: a package installs both
//     (so does `go install ./cmd/...`). Not when vigil's directory is a
//     source tree's root: a vigil-demo there is a build output of some
//     earlier checkout, and would run a demo of another version;
//   - in a source tree (./cmd/vigil-demo here, go on PATH), as for the
//     README's `go run ./cmd/vigil demo`: `go run ./cmd/vigil-demo`, so
//     the demo is built from the same source as this vigil.
//
// Not PATH: a vigil-demo found there is as likely a stale one from
// another checkout as the package's, which is beside vigil anyway.
func demoCommand(self string, lookPath func(string) (string, error), isDir func(string) bool) ([]string, error) {
	if self != "" {
		dir := filepath.Dir(self)
		if p := filepath.Join(dir, demoBinary); !isDir(filepath.Join(dir, demoSource)) && isExecutable(p) {
			return []string{p}, nil
		}
	}
	if isDir(demoSource) {
		gobin, err := lookPath("go")
		if err != nil {
			return nil, fmt.Errorf("this is a source tree (%s) but go is not on PATH: install Go to run the demo from source", demoSource)
		}
		return []string{gobin, "run", demoSource}, nil
	}
	return nil, fmt.Errorf("%s is not beside %s and this is no source tree (%s): install the package, which puts %s beside vigil, "+
		"or run `go run ./cmd/vigil demo` from vigil's source", demoBinary, self, demoSource, demoBinary)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
