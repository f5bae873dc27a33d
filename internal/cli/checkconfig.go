package cli

import (
	"flag"
	"fmt"
	"io"

	"github.com/vigil-dev/vigil/internal/daemon"
)

// runCheckConfig validates config files: exit 0 and a summary of each if
// they load, exit 2 and every error (key path and line) if not. Several
// files are the instances of one node (vigil@NAME reads
// /etc/vigil/NAME.yaml): they must not share a port, a state file or the
// engine they restart.
func runCheckConfig(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	show := fs.Bool("show", false, "print the effective config (secrets redacted)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: vigil check-config [--show] FILE\n       vigil check-config [--show] /etc/vigil/NAME.yaml ...   (the vigil@NAME instances of one node)")
	}
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() < 1 {
		fs.Usage()
		return exitUsage
	}
	code := exitOK
	var ins []instance
	for _, path := range fs.Args() {
		cfg, err := daemon.LoadConfig(path, false)
		if err != nil {
			fmt.Fprintln(stderr, err)
			code = exitUsage
			continue
		}
		for _, w := range append(cfg.Warnings, daemon.UnitWarnings(cfg, "/")...) { // unitcheck.go: what the installed unit forbids
			fmt.Fprintf(stderr, "warning: %s\n", w)
		}
		fmt.Fprintf(stdout, "%s: ok (engine %s, load balancer %s, restart %s, alerts %s, limiter %s)\n",
			path, cfg.Engine.URL, cfg.LoadBalancer.Kind, cfg.Restart.Kind, cfg.Alerts.Kind, daemon.LimiterSummary(cfg.Admission))
		if *show {
			fmt.Fprint(stdout, cfg.Redacted())
		}
		ins = append(ins, newInstance(path, cfg))
	}
	if len(ins) > 1 {
		conflicts := instanceConflicts(ins)
		for _, c := range conflicts {
			fmt.Fprintf(stderr, "check-config: instances %s\n", c)
		}
		if len(conflicts) > 0 {
			return exitUsage
		}
		fmt.Fprintf(stdout, "%d instances: no shared port, state file or engine\n", len(ins))
	}
	return code
}
