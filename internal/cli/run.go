package cli

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/vigil-dev/vigil/internal/daemon"
)

// runDaemon is `vigil run`: its flags, then the daemon (internal/daemon)
// until SIGTERM.
func runDaemon(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f daemon.Flags
	fs.StringVar(&f.Config, "config", "/etc/vigil/vigil.yaml", "config file")
	fs.BoolVar(&f.DryRun, "dry-run", false, "run the whole loop but only log and page what would be done")
	fs.StringVar(&f.LogLevel, "log-level", envOr("LOGRUS_LEVEL", "info"), "debug, info, warn or error")
	fs.BoolVar(&f.LogJSON, "log-json", false, "log JSON lines instead of text")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "vigil run: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	return daemon.Main(f, stderr)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
