package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/daemon"
	"github.com/vigil-dev/vigil/pool"
	"github.com/vigil-dev/vigil/routing"
	"github.com/vigil-dev/vigil/status"
	"github.com/vigil-dev/vigil/watchdog"
)

// Exit codes of diagnose, by state (also in the README).
const exitDiagnoseOther = 3

// runDiagnose samples the engine across a window and prints the verdict,
// its reason and the evidence. It needs nothing but the engine's URL, and
// changes nothing. Exit code: 0 healthy, 1 saturated, 2 hung or down,
// 3 anything else (or an error).
func runDiagnose(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("diagnose", flag.ContinueOnError)
	fs.SetOutput(stderr)
	engineURL := fs.String("engine", "", "the engine's base URL, e.g. http://127.0.0.1:8000")
	keyFile := fs.String("api-key-file", "", "file holding the engine's API key (or set VIGIL_ENGINE_API_KEY)")
	configFile := fs.String("config", "", "read the engine, thresholds and pool peers from this vigil config")
	window := fs.Duration("window", 30*time.Second, "how long to sample; hung needs a window longer than hang_after")
	interval := fs.Duration("interval", 5*time.Second, "time between samples")
	hangAfter := fs.Duration("hang-after", 0, "override watchdog.hang_after for this run")
	model := fs.String("model", "", "the model the completion probe asks for (default: engine.model, else the first /v1/models lists)")
	asJSON := fs.Bool("json", false, "print one JSON object (state, reason, evidence, ...)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: vigil diagnose --engine URL [--api-key-file F] [--window 30s] [--interval 5s] [--json]")
		fmt.Fprintln(stderr, "       vigil diagnose --config FILE [--window 30s] [--interval 5s] [--json]")
		fmt.Fprintln(stderr, "exit code: 0 healthy, 1 saturated, 2 hung or down, 3 anything else")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if (*engineURL == "") == (*configFile == "") || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "vigil diagnose: give exactly one of --engine URL or --config FILE")
		fs.Usage()
		return exitUsage
	}
	if *interval <= 0 || *window < *interval {
		fmt.Fprintln(stderr, "vigil diagnose: --interval must be > 0 and --window at least one interval")
		return exitUsage
	}

	cfg, code := diagnoseConfig(*configFile, *engineURL, *keyFile, stderr)
	if cfg == nil {
		return code
	}
	if *hangAfter > 0 {
		cfg.Watchdog.HangAfter = configs.Fixed(*hangAfter)
	}
	if *model != "" {
		cfg.Engine.Model = *model
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if !*asJSON {
		fmt.Fprintf(stderr, "sampling %s for %s every %s...\n", cfg.Engine.URL, *window, *interval)
	}
	ek := daemon.ResolveEngineKind(ctx, cfg.Engine)
	opts := watchdog.Options{Engine: ek.Engine, Watchdog: cfg.Watchdog, Node: cfg.Node}
	if cfg.Admission.Enabled {
		opts.MaxInFlight = cfg.Admission.MaxInFlight
	}
	report, err := watchdog.Diagnose(ctx, opts, *window, *interval)
	if err != nil {
		fmt.Fprintf(stderr, "vigil diagnose: %v\n", err)
		return exitDiagnoseOther
	}
	members, poolNote := daemon.ReadPool(ctx, cfg)
	// Whether keyed retries find their execution is the local vigil's
	// count over its window, not something a few samples can tell: read
	// it from the running vigil the config describes.
	var routing any
	routingLine := ""
	if *configFile != "" && cfg.Admission.Enabled && cfg.Admission.Coalesce && cfg.Status.Listen != "" {
		rep, err := localRouting(ctx, cfg.Status.Listen)
		switch {
		case err != nil:
			routingLine = fmt.Sprintf("routing: unknown, the local vigil's /status at %s: %v", cfg.Status.Listen, err)
			routing = map[string]string{"error": err.Error()}
		case rep != nil:
			routingLine, routing = rep.String(), rep
		}
	}

	if *asJSON {
		// Report has its own MarshalJSON; the engine kind, the pool and routing join its
		// fields by hand so the output stays one flat object.
		raw, err := json.Marshal(report)
		if err == nil {
			var obj map[string]json.RawMessage
			if err = json.Unmarshal(raw, &obj); err == nil {
				obj["engine_kind"], _ = json.Marshal(ek.Kind)
				obj["engine_kind_reason"], _ = json.Marshal(ek.Words)
				if len(ek.Families) > 0 {
					obj["metric_families"], _ = json.Marshal(ek.Families)
				}
				if len(members) > 0 {
					obj["pool"], _ = json.Marshal(members)
				}
				if poolNote != "" {
					obj["pool_note"], _ = json.Marshal(poolNote)
				}
				if routing != nil {
					obj["routing"], _ = json.Marshal(routing)
				}
				raw, err = json.Marshal(obj)
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "vigil diagnose: encode: %v\n", err)
			return exitDiagnoseOther
		}
		fmt.Fprintln(stdout, string(raw))
	} else {
		report.WriteText(stdout)
		fmt.Fprintf(stdout, "\nEngine kind\n  %s\n", ek.Words)
		if len(members) > 0 {
			self := pool.Member{Node: cfg.Node, State: string(report.State), Waiting: report.Evidence.Waiting, Running: report.Evidence.Running}
			fmt.Fprintf(stdout, "\n%s\n", pool.Summarize(self, members))
		}
		if poolNote != "" {
			fmt.Fprintf(stdout, "\n%s\n", poolNote)
		}
		if routingLine != "" {
			fmt.Fprintf(stdout, "\n%s\n", routingLine)
		}
	}
	return watchdog.ExitCode(report.State)
}

// diagnoseConfig builds the config diagnose runs with: the file's, or the
// defaults aimed at --engine. A nil config comes with the exit code.
func diagnoseConfig(file, engineURL, keyFile string, stderr io.Writer) (*configs.Config, int) {
	if file != "" {
		cfg, err := configs.Load(file)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return nil, exitUsage
		}
		return cfg, 0
	}
	cfg := configs.Default()
	cfg.Engine.URL = strings.TrimRight(engineURL, "/")
	cfg.Engine.APIKeySource = configs.SecretSource{File: keyFile}
	if keyFile == "" && os.Getenv("VIGIL_ENGINE_API_KEY") != "" {
		cfg.Engine.APIKeySource = configs.SecretSource{Env: "VIGIL_ENGINE_API_KEY"}
	}
	key, err := cfg.Engine.APIKeySource.Resolve()
	if err != nil {
		fmt.Fprintf(stderr, "vigil diagnose: engine API key: %v\n", err)
		return nil, exitUsage
	}
	cfg.Engine.APIKey = key
	if err := configs.ValidateEngine(cfg.Engine); err != nil {
		fmt.Fprintf(stderr, "vigil diagnose: --engine: %v\n", err)
		return nil, exitUsage
	}
	return &cfg, 0
}

// localRouting reads the routing section of the local vigil's /status; nil
// when that vigil reports none (no coalescing limiter).
func localRouting(ctx context.Context, listen string) (*routing.AffinityReport, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	raw, err := status.NewClient(listen).Status(ctx)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Routing *routing.AffinityReport `json:"routing"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("not a vigil status document: %v", err)
	}
	return doc.Routing, nil
}
