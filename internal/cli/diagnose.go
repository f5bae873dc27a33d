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

// diagnoseFlags are diagnose's command line.
type diagnoseFlags struct {
	engineURL, keyFile, configFile, model string
	// status is the local vigil's status listener (--status), read for
	// its limiter's counts.
	status                      string
	window, interval, hangAfter time.Duration
	asJSON                      bool
}

// diagnosis is what diagnose found: the watchdog's report and what joins
// it (the engine kind, the pool, the routing share).
type diagnosis struct {
	report   watchdog.Report
	ek       daemon.EngineKind
	members  []pool.Member
	poolNote string
	// routing is the local vigil's routing share (or its error) and
	// routingLine the same in words; nil and "" when not asked.
	routing     any
	routingLine string
}

// runDiagnose samples the engine across a window and prints the verdict,
// its reason and the evidence. It needs nothing but the engine's URL, and
// changes nothing. Exit code: 0 healthy, 1 saturated, 2 hung or down,
// 3 anything else (or an error).
func runDiagnose(args []string, stdout, stderr io.Writer) int {
	f, code, ok := parseDiagnoseFlags(args, stderr)
	if !ok {
		return code
	}
	cfg, code := diagnoseConfig(f.configFile, f.engineURL, f.keyFile, stderr)
	if cfg == nil {
		return code
	}
	if f.hangAfter > 0 {
		cfg.Watchdog.HangAfter = configs.Fixed(f.hangAfter)
	}
	if f.model != "" {
		cfg.Engine.Model = f.model
	}
	// The config's own vigil is read only when it runs a limiter: one with
	// admission off counts no calls.
	listen := ""
	if cfg.Admission.Enabled {
		listen = cfg.Status.Listen
	}
	vigilURL, err := statusURL(f.status, f.configFile, listen)
	if err != nil {
		fmt.Fprintf(stderr, "vigil diagnose: %v\n", err)
		return exitUsage
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if !f.asJSON {
		fmt.Fprintf(stderr, "sampling %s for %s every %s...\n", cfg.Engine.URL, f.window, f.interval)
	}
	var src watchdog.LimiterSource
	var notCounted string
	if vigilURL != "" {
		if src, notCounted, err = findVigil(ctx, vigilURL, cfg.Engine.URL); err != nil {
			fmt.Fprintf(stderr, "vigil diagnose: %v\n", err)
			return exitDiagnoseOther
		}
	}
	dg := diagnosis{ek: daemon.ResolveEngineKind(ctx, cfg.Engine)}
	opts := watchdog.Options{Engine: dg.ek.Engine, Watchdog: cfg.Watchdog, Node: cfg.Node, LimiterSource: src}
	if cfg.Admission.Enabled {
		opts.MaxInFlight = cfg.Admission.MaxInFlight
	}
	report, err := watchdog.Diagnose(ctx, opts, f.window, f.interval)
	if err != nil {
		fmt.Fprintf(stderr, "vigil diagnose: %v\n", err)
		return exitDiagnoseOther
	}
	switch {
	case notCounted != "":
		report.Notes = append(report.Notes, notCounted)
	case vigilURL == "" && report.Evidence.Hang == watchdog.HangWedged:
		report.Notes = append(report.Notes, "no vigil's limiter read (--config or --status): calls the engine answers through one are not counted, and an API server starved under load looks wedged alone")
	}
	dg.report = report
	dg.members, dg.poolNote = daemon.ReadPool(ctx, cfg)
	// Whether keyed retries find their execution is the local vigil's
	// count over its window, not something a few samples can tell: read
	// it from the running vigil the config describes.
	if f.configFile != "" && cfg.Admission.Enabled && cfg.Admission.Coalesce && vigilURL != "" {
		dg.routing, dg.routingLine = readRouting(ctx, vigilURL)
	}

	if f.asJSON {
		raw, err := dg.json()
		if err != nil {
			fmt.Fprintf(stderr, "vigil diagnose: encode: %v\n", err)
			return exitDiagnoseOther
		}
		fmt.Fprintln(stdout, string(raw))
	} else {
		dg.writeText(stdout, cfg.Node)
	}
	return watchdog.ExitCode(report.State)
}

// parseDiagnoseFlags parses diagnose's flags; !ok comes with the exit
// code, the usage already printed.
func parseDiagnoseFlags(args []string, stderr io.Writer) (f diagnoseFlags, code int, ok bool) {
	fs := flag.NewFlagSet("diagnose", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.engineURL, "engine", "", "the engine's base URL, e.g. http://127.0.0.1:8000")
	fs.StringVar(&f.keyFile, "api-key-file", "", "file holding the engine's API key (or set VIGIL_ENGINE_API_KEY)")
	fs.StringVar(&f.configFile, "config", "", "read the engine, thresholds and pool peers from this vigil config")
	fs.StringVar(&f.status, "status", "", "the local vigil's status listener, read for the calls its limiter answers (default with --config: status.listen; off: none)")
	fs.DurationVar(&f.window, "window", 30*time.Second, "how long to sample; hung needs a window longer than hang_after")
	fs.DurationVar(&f.interval, "interval", 5*time.Second, "time between samples")
	fs.DurationVar(&f.hangAfter, "hang-after", 0, "override watchdog.hang_after for this run")
	fs.StringVar(&f.model, "model", "", "the model the completion probe asks for (default: engine.model, else the first /v1/models lists)")
	fs.BoolVar(&f.asJSON, "json", false, "print one JSON object (state, reason, evidence, ...)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: vigil diagnose --engine URL [--api-key-file F] [--status URL] [--window 30s] [--interval 5s] [--json]")
		fmt.Fprintln(stderr, "       vigil diagnose --config FILE [--status URL|off] [--window 30s] [--interval 5s] [--json]")
		fmt.Fprintln(stderr, "exit code: 0 healthy, 1 saturated, 2 hung or down, 3 anything else")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return f, exitUsage, false
	}
	if (f.engineURL == "") == (f.configFile == "") || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "vigil diagnose: give exactly one of --engine URL or --config FILE")
		fs.Usage()
		return f, exitUsage, false
	}
	if f.interval <= 0 || f.window < f.interval {
		fmt.Fprintln(stderr, "vigil diagnose: --interval must be > 0 and --window at least one interval")
		return f, exitUsage, false
	}
	return f, exitOK, true
}

// readRouting is the local vigil's routing share, as a JSON value and in
// words; its error, when it cannot be read, in both forms.
func readRouting(ctx context.Context, listen string) (any, string) {
	rep, err := localRouting(ctx, listen)
	switch {
	case err != nil:
		return map[string]string{"error": err.Error()},
			fmt.Sprintf("routing: unknown, the local vigil's /status at %s: %v", listen, err)
	case rep != nil:
		return rep, rep.String()
	}
	return nil, ""
}

// json is the diagnosis as one flat object: the report's own fields
// (Report has its own MarshalJSON) with the engine kind, the pool and
// routing joined by hand.
func (dg *diagnosis) json() ([]byte, error) {
	raw, err := json.Marshal(dg.report)
	if err != nil {
		return nil, err
	}
	var obj map[string]json.RawMessage
	if err = json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	obj["engine_kind"], _ = json.Marshal(dg.ek.Kind)
	obj["engine_kind_reason"], _ = json.Marshal(dg.ek.Words)
	if len(dg.ek.Families) > 0 {
		obj["metric_families"], _ = json.Marshal(dg.ek.Families)
	}
	if len(dg.members) > 0 {
		obj["pool"], _ = json.Marshal(dg.members)
	}
	if dg.poolNote != "" {
		obj["pool_note"], _ = json.Marshal(dg.poolNote)
	}
	if dg.routing != nil {
		obj["routing"], _ = json.Marshal(dg.routing)
	}
	return json.Marshal(obj)
}

// writeText is the diagnosis for a person: the report, then the engine
// kind, the pool with this node in it, and routing.
func (dg *diagnosis) writeText(w io.Writer, node string) {
	dg.report.WriteText(w)
	fmt.Fprintf(w, "\nEngine kind\n  %s\n", dg.ek.Words)
	if len(dg.members) > 0 {
		self := pool.Member{Node: node, State: string(dg.report.State), Waiting: dg.report.Evidence.Waiting, Running: dg.report.Evidence.Running}
		fmt.Fprintf(w, "\n%s\n", pool.Summarize(self, dg.members))
	}
	if dg.poolNote != "" {
		fmt.Fprintf(w, "\n%s\n", dg.poolNote)
	}
	if dg.routingLine != "" {
		fmt.Fprintf(w, "\n%s\n", dg.routingLine)
	}
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
