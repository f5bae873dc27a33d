package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/status"
)

const overrideUsage = `usage:
  vigil override set [--status ADDR] (--until TIME | --for DURATION) --reason TEXT KEY VALUE
  vigil override list [--status ADDR]
  vigil override clear [--status ADDR] KEY

Every override expires: vigil restores the value it replaced at --until (at
most 7 days ahead) and pages when it starts, before it ends and when it ends.
Keys: ` + "admission.max_in_flight, watchdog.hang_after, watchdog.saturated_waiting" + `
ADDR is vigil's status.listen (default 127.0.0.1:9108, or --config FILE's).
`

// runOverride is `vigil override`: temporary changes that expire, made
// through the running vigil's localhost API.
func runOverride(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, overrideUsage)
		return exitUsage
	}
	verb, rest := args[0], args[1:]
	fs := flag.NewFlagSet("override "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, overrideUsage) }
	addr := fs.String("status", "", "vigil's status listener (status.listen)")
	configFile := fs.String("config", "", "read status.listen from this config")
	until := fs.String("until", "", "when the override ends (RFC 3339, e.g. 2026-12-01T09:00:00Z)")
	forDur := fs.Duration("for", 0, "how long the override lasts (instead of --until), e.g. 2h")
	reason := fs.String("reason", "", "why: the next operator reads it in every page")
	if err := fs.Parse(rest); err != nil {
		return exitUsage
	}
	base := *addr
	if base == "" {
		base = configs.Default().Status.Listen
		if *configFile != "" {
			cfg, err := configs.Load(*configFile)
			if err != nil {
				fmt.Fprintln(stderr, err)
				return exitUsage
			}
			base = cfg.Status.Listen
		}
	}
	client := status.NewClient(base)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	switch verb {
	case "set":
		if fs.NArg() != 2 {
			fmt.Fprintln(stderr, "vigil override set: give KEY and VALUE")
			return exitUsage
		}
		o := configs.Override{Key: fs.Arg(0), Value: fs.Arg(1), Reason: *reason}
		switch {
		case *until != "" && *forDur != 0:
			fmt.Fprintln(stderr, "vigil override set: give --until or --for, not both")
			return exitUsage
		case *until != "":
			t, err := time.Parse(time.RFC3339, *until)
			if err != nil {
				fmt.Fprintf(stderr, "vigil override set: --until: %v\n", err)
				return exitUsage
			}
			o.Until = t
		case *forDur > 0:
			o.Until = time.Now().Add(*forDur)
		default:
			fmt.Fprintln(stderr, "vigil override set: --until or --for is required: every override expires")
			return exitUsage
		}
		if err := configs.ValidateOverride(o, time.Now()); err != nil {
			fmt.Fprintf(stderr, "vigil override set: %v\n", err)
			return exitUsage
		}
		a, err := client.SetOverride(ctx, o)
		if err != nil {
			fmt.Fprintf(stderr, "vigil override set: %v\n", err)
			return exitFail
		}
		fmt.Fprintf(stdout, "%s = %s until %s (was %s): %s\n", a.Key, a.Value, a.Until.Local().Format(time.RFC3339), orNone(a.Replaced), a.Reason)
	case "list":
		list, err := client.ListOverrides(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "vigil override list: %v\n", err)
			return exitFail
		}
		if len(list) == 0 {
			fmt.Fprintln(stdout, "no overrides in force")
		}
		for _, a := range list {
			fmt.Fprintf(stdout, "%s = %s until %s (%s left; was %s; %s): %s\n", a.Key, a.Value,
				a.Until.Local().Format(time.RFC3339), time.Until(a.Until).Round(time.Minute), orNone(a.Replaced), a.Source, a.Reason)
		}
	case "clear":
		if fs.NArg() != 1 {
			fmt.Fprintln(stderr, "vigil override clear: give KEY")
			return exitUsage
		}
		a, err := client.ClearOverride(ctx, fs.Arg(0))
		if err != nil {
			fmt.Fprintf(stderr, "vigil override clear: %v\n", err)
			return exitFail
		}
		fmt.Fprintf(stdout, "%s restored to %s\n", a.Key, orNone(a.Replaced))
	default:
		fmt.Fprintf(stderr, "vigil override: unknown verb %q\n%s", verb, overrideUsage)
		return exitUsage
	}
	return exitOK
}

func orNone(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(none)"
	}
	return s
}
