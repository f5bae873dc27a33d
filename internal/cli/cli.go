package cli

import (
	"fmt"
	"io"

	"github.com/vigil-dev/vigil/internal/daemon"
)

// Exit codes shared by every subcommand. diagnose has its own, by state.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2 // usage or config errors
)

const usage = `vigil keeps an LLM inference engine serving under overload.

Usage:
  vigil run --config FILE [--dry-run]     the daemon: watchdog + admission limiter
  vigil diagnose --engine URL [flags]     sample the engine and say saturated, hung or healthy
  vigil diagnose --config FILE [flags]
  vigil demo                              the whole story on a simulated engine, no GPU
  vigil override set|list|clear ...       temporary changes that expire
  vigil check-config FILE                 validate a config file
  vigil version

Run "vigil COMMAND -h" for a command's flags.
`

// Main is `vigil ARGS...`: the exit code of the subcommand args name.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "run" {
		// Only the daemon: see daemon.Procs. Tests call run directly
		// and keep the test binary's own setting.
		daemon.SetProcs()
	}
	return run(args, stdout, stderr)
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return runDaemon(rest, stderr)
	case "diagnose":
		return runDiagnose(rest, stdout, stderr)
	case "demo":
		return runDemo(rest, stdout, stderr)
	case "override":
		return runOverride(rest, stdout, stderr)
	case "check-config":
		return runCheckConfig(rest, stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintf(stdout, "vigil %s\n", daemon.Version())
		return exitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "vigil: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}
