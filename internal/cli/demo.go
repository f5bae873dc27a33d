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

// demoCommand is how to run the demo, first found wins:
//   - vigil-demo beside vigil's own executable: a package installs both;
//   - in a source tree (./cmd/vigil-demo here, go on PATH), as for the
//     README's `go run ./cmd/vigil demo`: `go run ./cmd/vigil-demo`, so
//     the demo is built from the same source as this vigil, not some
//     other version on PATH;
//   - vigil-demo on PATH.
func demoCommand(self string, lookPath func(string) (string, error), isDir func(string) bool) ([]string, error) {
	if self != "" {
		if p := filepath.Join(filepath.Dir(self), demoBinary); isExecutable(p) {
			return []string{p}, nil
		}
	}
	if isDir(demoSource) {
		if gobin, err := lookPath("go"); err == nil {
			return []string{gobin, "run", demoSource}, nil
		}
	}
	if p, err := lookPath(demoBinary); err == nil {
		return []string{p}, nil
	}
	return nil, fmt.Errorf("%s is neither beside %s nor on PATH, and this is no source tree with go on PATH "+
		"(./cmd/vigil-demo): install the package's %s, or run `go run ./cmd/vigil demo` from vigil's source", demoBinary, self, demoBinary)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
