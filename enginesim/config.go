package enginesim

import (
	"errors"
	"fmt"
	"time"
)

// Config describes one simulated engine. Every duration in it is ENGINE time:
// the wall-clock time is the engine time divided by Scale.
type Config struct {
	// Model is the served model name reported by /v1/models and the metrics.
	Model string
	// APIKey, when not empty, is required as "Authorization: Bearer <key>" on /v1/*.
	APIKey string

	// DataParallel is the number of engine cores (vLLM --data-parallel-size):
	// each rank has its own scheduler, KV cache, step loop and series
	// (engine="<rank>"), and requests go to the ranks round-robin. 0 or 1:
	// one rank. MaxNumSeqs, StepTokens, KVCacheTokens and PrefixCacheSize
	// are per rank.
	DataParallel int

	// MaxNumSeqs caps the sequences in the running batch (vLLM --max-num-seqs).
	MaxNumSeqs int
	// StepTokens is the per-step token budget (vLLM --max-num-batched-tokens).
	StepTokens int
	// MaxModelLen rejects a request whose prompt plus output cannot fit (400).
	MaxModelLen int
	// KVCacheTokens is the KV-cache capacity in tokens. A request reserves its
	// uncached prompt plus its output at admission; when that does not fit, it
	// and everything behind it wait (FCFS), so the engine never preempts.
	// Unless Preempt is set.
	KVCacheTokens int
	// Preempt allocates KV cache as vLLM's v1 scheduler does: a request
	// takes its uncached prompt at admission and one token per token it
	// generates; when a step's decodes do not fit, the newest running
	// requests are preempted (their KV freed, counted in
	// vllm:num_preemptions_total) and go back to the head of the waiting
	// queue, to recompute their prompt and what they had generated. The
	// engine then admits far more than its cache holds to the end, and past
	// that batch every added request is prefill paid twice.
	Preempt bool
	// PrefixCacheSize bounds the number of shared prefixes (by prefix id) the
	// prefix cache remembers, least recently used first out.
	PrefixCacheSize int

	// Cost model: step = StepOverhead + prefill tokens*PrefillTokenCost +
	// sequences in the step*SeqCost + context tokens the step's decodes
	// attend to*ContextTokenCost.
	StepOverhead     time.Duration
	PrefillTokenCost time.Duration
	SeqCost          time.Duration
	// ContextTokenCost prices a decode's reading of its own KV cache
	// (prompt and answer so far): on a real engine decoding long contexts
	// is bound by that memory traffic, so every long stream added to the
	// batch slows every step. 0 (the default): a decode costs SeqCost
	// whatever its context.
	ContextTokenCost time.Duration

	// Scale is how much faster engine time runs than wall time (10: a 50 ms
	// step sleeps 5 ms). Metrics and histograms stay in engine time.
	Scale float64
	// LoadTime is how long (engine time) the API port stays closed after
	// Start, as vLLM loading weights. Only Server honours it.
	LoadTime time.Duration
	// AbortOnDisconnect removes a request from the scheduler when its client
	// goes away (after at most two more paid steps). Off, it runs to the end.
	AbortOnDisconnect bool
	// Metrics is the metric name set /metrics serves: MetricsVLLM (""
	// too), MetricsSGLang or MetricsLlamaCpp. The engine is the same under
	// each; only the exposition differs.
	Metrics string
	// ControlAddr is where Start opens the fault-control listener
	// ("127.0.0.1:0" when empty).
	ControlAddr string
}

// DefaultConfig returns the calibrated defaults (see doc.go for the capacity
// they give).
func DefaultConfig() Config {
	return Config{
		Model:             "meta-llama/Llama-3.1-8B-Instruct",
		MaxNumSeqs:        256,
		StepTokens:        8192,
		MaxModelLen:       131072,
		KVCacheTokens:     4_000_000,
		PrefixCacheSize:   1024,
		StepOverhead:      10 * time.Millisecond,
		PrefillTokenCost:  31400 * time.Nanosecond,
		SeqCost:           100 * time.Microsecond,
		Scale:             1,
		AbortOnDisconnect: true,
	}
}

// Validate reports the first unusable field.
func (c Config) Validate() error {
	switch {
	case c.Model == "":
		return errors.New("enginesim: Model is empty")
	case c.DataParallel < 0 || c.DataParallel > maxDataParallel:
		return fmt.Errorf("enginesim: DataParallel %d out of range 0..%d", c.DataParallel, maxDataParallel)
	case c.MaxNumSeqs < 1:
		return fmt.Errorf("enginesim: MaxNumSeqs %d < 1", c.MaxNumSeqs)
	case c.StepTokens < 1:
		return fmt.Errorf("enginesim: StepTokens %d < 1", c.StepTokens)
	case c.MaxModelLen < 2:
		return fmt.Errorf("enginesim: MaxModelLen %d < 2", c.MaxModelLen)
	case c.KVCacheTokens < 2:
		return fmt.Errorf("enginesim: KVCacheTokens %d < 2", c.KVCacheTokens)
	case c.PrefixCacheSize < 0:
		return fmt.Errorf("enginesim: PrefixCacheSize %d < 0", c.PrefixCacheSize)
	case c.StepOverhead < 0 || c.PrefillTokenCost < 0 || c.SeqCost < 0 || c.ContextTokenCost < 0:
		return errors.New("enginesim: negative cost model value")
	case c.StepOverhead+c.PrefillTokenCost+c.SeqCost <= 0:
		// A zero-cost step would make the core spin without ever sleeping.
		return errors.New("enginesim: cost model is all zero")
	case !(c.Scale > 0):
		return fmt.Errorf("enginesim: Scale %v must be > 0", c.Scale)
	case c.LoadTime < 0:
		return errors.New("enginesim: negative LoadTime")
	}
	if err := validMetrics(c.Metrics); err != nil {
		return err
	}
	return nil
}

// maxDataParallel bounds DataParallel: far above any real deployment on one
// node, low enough that a typo does not start a million goroutines.
const maxDataParallel = 64

// ranks is the number of engine cores DataParallel asks for.
func (c Config) ranks() int { return max(1, c.DataParallel) }

// wall converts an engine duration into the wall duration it takes.
func (c Config) wall(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.Scale)
}
