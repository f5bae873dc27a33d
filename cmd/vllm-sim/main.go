package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/vigil-dev/vigil/enginesim"
)

func main() { os.Exit(run()) }

func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return runWith(ctx, os.Args[1:], os.Stderr, nil)
}

// runWith is main without the process: started, when set, sees the server
// once it is listening (tests use it to learn the ports).
func runWith(ctx context.Context, args []string, stderr io.Writer, started func(*enginesim.Server)) int {
	cfg, listen, code := parseFlags(args, stderr)
	if code >= 0 {
		return code
	}
	return serve(ctx, listen, cfg, stderr, started)
}

// parseFlags reads the command line into the engine's config and its API
// address; code is the exit code when the command ends here (help,
// -version, a bad flag), else -1.
func parseFlags(args []string, stderr io.Writer) (cfg enginesim.Config, listen string, code int) {
	cfg = enginesim.DefaultConfig()
	fs := flag.NewFlagSet("vllm-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listenFlag := fs.String("listen", "127.0.0.1:8000", "API listen address (OpenAI API, /metrics, /health, /version)")
	fs.StringVar(&cfg.ControlAddr, "control", "127.0.0.1:8100", "fault-control listen address")
	fs.StringVar(&cfg.Model, "model", cfg.Model, "served model name")
	keyFile := fs.String("api-key-file", "", "file holding the API key required on /v1/* (empty: no key)")
	fs.IntVar(&cfg.DataParallel, "data-parallel", 1,
		"data-parallel engine ranks, each with its own scheduler, KV cache and engine=\"N\" series; requests go round-robin")
	fs.IntVar(&cfg.MaxNumSeqs, "max-num-seqs", cfg.MaxNumSeqs, "max sequences in the running batch, per rank")
	fs.IntVar(&cfg.StepTokens, "step-tokens", cfg.StepTokens, "per-step token budget (max-num-batched-tokens), per rank")
	fs.IntVar(&cfg.MaxModelLen, "max-model-len", cfg.MaxModelLen, "max prompt+output tokens per request")
	fs.IntVar(&cfg.KVCacheTokens, "kv-cache-tokens", cfg.KVCacheTokens, "KV-cache capacity in tokens, per rank")
	fs.IntVar(&cfg.PrefixCacheSize, "prefix-cache-size", cfg.PrefixCacheSize, "shared prefixes remembered (LRU), per rank")
	fs.StringVar(&cfg.Metrics, "metrics", enginesim.MetricsVLLM,
		"metric names /metrics serves: vllm, sglang (sglang:num_queue_reqs ...) or llamacpp (llamacpp:requests_deferred ...)")
	fs.Float64Var(&cfg.Scale, "scale", cfg.Scale, "engine time runs this many times faster than wall time")
	fs.DurationVar(&cfg.LoadTime, "load-time", cfg.LoadTime, "engine time before the API port opens")
	fs.BoolVar(&cfg.AbortOnDisconnect, "abort-on-disconnect", cfg.AbortOnDisconnect,
		"remove a request when its client disconnects (false: run it to completion)")
	fs.DurationVar(&cfg.StepOverhead, "step-overhead", cfg.StepOverhead, "cost model: fixed time per step")
	fs.DurationVar(&cfg.PrefillTokenCost, "prefill-token-cost", cfg.PrefillTokenCost, "cost model: time per prefilled token")
	fs.DurationVar(&cfg.SeqCost, "seq-cost", cfg.SeqCost, "cost model: time per sequence in the step")
	costModel := fs.String("cost-model", "", "an engine of the family (enginesim.CostModels): "+strings.Join(enginesim.CostModelNames(), ", ")+
		"; not with the cost or kv-cache flags")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, "", 0
		}
		return cfg, "", 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "vllm-sim: unexpected arguments %q\n", fs.Args())
		return cfg, "", 2
	}
	if *costModel != "" {
		m, err := enginesim.CostModelByName(*costModel)
		if err != nil {
			fmt.Fprintf(stderr, "vllm-sim: -cost-model: %v\n", err)
			return cfg, "", 2
		}
		var clash []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "step-overhead", "prefill-token-cost", "seq-cost", "kv-cache-tokens":
				clash = append(clash, "-"+f.Name)
			}
		})
		if len(clash) > 0 {
			fmt.Fprintf(stderr, "vllm-sim: -cost-model %s sets the cost itself; drop %s\n", m.Name, strings.Join(clash, ", "))
			return cfg, "", 2
		}
		m.Apply(&cfg)
	}
	if *version {
		fmt.Fprintln(stderr, enginesim.Version)
		return cfg, "", 0
	}
	if *keyFile != "" {
		b, err := os.ReadFile(*keyFile)
		if err != nil {
			fmt.Fprintf(stderr, "vllm-sim: -api-key-file: %v\n", err)
			return cfg, "", 2
		}
		cfg.APIKey = strings.TrimSpace(string(b))
		if cfg.APIKey == "" {
			fmt.Fprintf(stderr, "vllm-sim: -api-key-file %s is empty\n", *keyFile)
			return cfg, "", 2
		}
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "vllm-sim: %v\n", err)
		return cfg, "", 2
	}
	return cfg, *listenFlag, -1
}

// serve runs the simulated engine on listen until ctx ends or its core
// crashes (an injected fault), and returns the exit code.
func serve(ctx context.Context, listen string, cfg enginesim.Config, stderr io.Writer, started func(*enginesim.Server)) int {
	log := slog.New(slog.NewTextHandler(stderr, nil))

	srv, err := enginesim.Start(ctx, listen, cfg)
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	defer srv.Close()
	log.Info("loading", "api", srv.URL(), "control", srv.ControlURL(), "model", cfg.Model,
		"data_parallel", srv.Engine.Ranks(),
		"load_time", cfg.LoadTime, "scale", cfg.Scale, "abort_on_disconnect", cfg.AbortOnDisconnect,
		"api_key", cfg.APIKey != "")
	if started != nil {
		started(srv)
	}
	select {
	case <-srv.Ready():
		log.Info("loaded", "api", srv.URL())
	case <-srv.Done():
	}
	select {
	case <-srv.Engine.Crashed():
		log.Error("engine core crashed (fault injected); exiting")
		return 1
	case <-srv.Done():
	}
	if err := srv.Err(); err != nil {
		log.Error("API listener failed", "err", err)
		return 1
	}
	select {
	case <-srv.Engine.Crashed():
		log.Error("engine core crashed (fault injected); exiting")
		return 1
	default:
	}
	log.Info("stopping", "reason", "signal")
	return 0
}
