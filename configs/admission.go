package configs

import (
	"strings"
	"time"
)

// Admission configures the embedded limiter, a reverse proxy in front of
// the engine's OpenAI API (docs/design.md section 6).
type Admission struct {
	Enabled bool   `yaml:"enabled"`
	Listen  string `yaml:"listen"`
	// AllowRemote permits a non-loopback Listen (e.g. a load balancer on
	// another host sends traffic here). The proxy injects the engine's API
	// key, so opening it to other hosts must be a deliberate choice.
	AllowRemote bool `yaml:"allow_remote"`
	// MaxInFlight caps requests forwarded and unfinished. 0 = automatic:
	// adapted to the most the engine runs without queueing (its own
	// waiting gauge), to ttft_target for streamed answers and to the
	// clients' announced timeouts for plain ones (see package admission).
	MaxInFlight int `yaml:"max_in_flight"`
	// TTFTTarget is the time to first token (p90, streamed answers, at the
	// engine) the automatic cap keeps within, through its first-token
	// limit (streams awaiting their first token at once) and then the cap;
	// it is the latency objective, not a capacity figure, and a stream's
	// queue wait gets what it leaves after the engine's own TTFT (with
	// auto, what 2 s leaves, or the objective when longer).
	// auto (the default) = over long prompts, twice the engine's own
	// light-load prefill of the prompts in flight; otherwise 500 ms, or
	// twice the engine's own time to first token (one stream at a time)
	// when that is longer: see package admission/core. 0 = none: the
	// automatic cap then only keeps the engine's own queue empty (its
	// maximum throughput), with no first-token limit.
	TTFTTarget AutoDuration `yaml:"ttft_target"`
	// EngineMaxSeqs is the engine's --max-num-seqs, which vLLM does not
	// export. With long prompts the engine's waiting gauge is never empty
	// (prompts wait their turn for the step's token budget); the automatic
	// cap tells that prefill backlog from a full engine by the engine's KV
	// usage and its running batch against this many seats. 0 = vLLM's
	// default, 256.
	EngineMaxSeqs int `yaml:"engine_max_seqs"`
	// MaxQueue, MaxQueueBytes and MaxQueueWait bound the wait queue by
	// count, by the request bodies it holds, and by age. The queue is
	// meant to hold an overload's backlog (the engine's own queue stays
	// shallow), so it is long; a request's wait is also cut to half its
	// client's timeout (announced in X-Stainless-Timeout, else inferred:
	// see ClientTimeouts), and a keyed call keeps its place across its
	// attempts. MaxQueueBytes 0 = no byte bound.
	MaxQueue      int           `yaml:"max_queue"`
	MaxQueueBytes int64         `yaml:"max_queue_bytes"`
	MaxQueueWait  time.Duration `yaml:"max_queue_wait"`
	// StreamQueueWait bounds the queue wait of a streamed request whose
	// client announced no timeout: past it the first token is worth little
	// (a chat user has given up on it). 0 (the default) = what ttft_target
	// leaves once the engine's own time to first token is spent (at least
	// a tenth of it; with auto, what the objective leaves, or what 2 s
	// (or the objective when longer) leaves for a retry or on a path
	// whose clients come back for the streams it turns away), or 10 s
	// when there is no objective. A new stream that the queue could
	// not reach within its bound, at the measured drain rate, is answered
	// at once with 503 and an honest Retry-After instead of queueing.
	// Plain (unary) calls keep max_queue_wait.
	StreamQueueWait time.Duration `yaml:"stream_queue_wait"`
	// ClientTimeouts is the timeout assumed for the clients of a path when
	// a request announces none (the OpenAI Node SDK sends
	// X-Stainless-Timeout only with a per-request timeout, not with the
	// usual client-level one): the queue wait is cut to half
	// of it (a plain call's to what two of the engine's typical answers
	// leave of it, when that is longer), and the automatic cap keeps plain answers within it, as for
	// an announced one. A tenant's client_timeout comes first; without
	// either, the timeout is learned from when the path's clients give up
	// (disconnects before any answer, and retries of the same
	// Idempotency-Key).
	ClientTimeouts []RouteTimeout `yaml:"client_timeouts"`
	// Order: newest_first (default: the oldest first attempt whose answer
	// can still make its client's timeout, else first attempts newest
	// first, as the oldest one's client is about to give up; then
	// retries, oldest call first) or fifo.
	Order string `yaml:"order"`
	// IdempotencyHeader names the per-call key header used for coalescing.
	IdempotencyHeader string `yaml:"idempotency_header"`
	// Coalesce attaches retries of the same call to the running execution.
	Coalesce bool `yaml:"coalesce"`
	// CancelAfter defers upstream cancellation when the last listener of a
	// keyed call leaves, so a retry can attach.
	CancelAfter time.Duration `yaml:"cancel_after"`
	// MaxMoves bounds how often a call cut by a lost (hung or down) engine
	// is sent again: to a pool peer's limiter, or to the restarted engine
	// after it was held. 0 turns moving off: such calls fail, as without
	// vigil.
	MaxMoves int `yaml:"max_moves"`
	// SuspectStalls: the limiter suspects a stalled engine within seconds
	// from the bytes it sees (docs/design.md, the hang window) and sends
	// nothing new to it while suspected: calls go to a pool peer or wait
	// in the queue, none is refused for it. Reversible; it restarts
	// nothing. On by default.
	SuspectStalls bool `yaml:"suspect_stalls"`
	// ResultTTL keeps finished results for late retries, within
	// ResultStoreBytes of memory.
	ResultTTL        time.Duration `yaml:"result_ttl"`
	ResultStoreBytes int64         `yaml:"result_store_bytes"`
	// RetryRatio of first attempts over RetryWindow may be retries that
	// create new executions.
	RetryRatio  float64       `yaml:"retry_ratio"`
	RetryWindow time.Duration `yaml:"retry_window"`
	// MaxBodyBytes rejects larger request bodies with 413.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// ReadHeaderTimeout and ReadTimeout protect against slow clients.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	ReadTimeout       time.Duration `yaml:"read_timeout"`
	// ShutdownGrace is how long a stopping vigil (SIGTERM) lets the
	// requests in flight through it finish before it cuts them. Keep it
	// under the unit's TimeoutStopSec (60s).
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	// InjectAPIKey sends the engine's API key upstream so clients never
	// hold it.
	InjectAPIKey bool `yaml:"inject_api_key"`
	// SlowStart ramps the cap from a fraction back to full after recovery.
	SlowStart time.Duration `yaml:"slow_start"`
	// Tenants limits each client API key.
	Tenants Tenants `yaml:"tenants"`
}

// Tenants holds per-API-key limits: Default applies to every key not
// listed in Keys. Keys are identified by a name and the SHA-256 of the key,
// so no client key sits in the config in clear.
type Tenants struct {
	Default TenantLimits  `yaml:"default"`
	Keys    []TenantEntry `yaml:"keys"`
}

// TenantLimits: 0 means unlimited.
type TenantLimits struct {
	RPM         int `yaml:"rpm"`
	TPM         int `yaml:"tpm"`
	MaxInFlight int `yaml:"max_in_flight"`
	// ClientTimeout is the timeout the key's clients are assumed to have
	// when a request announces none (0: see admission.client_timeouts).
	ClientTimeout time.Duration `yaml:"client_timeout"`
}

// RouteTimeout is the client timeout assumed on one path (e.g.
// /v1/chat/completions).
type RouteTimeout struct {
	Path    string        `yaml:"path"`
	Timeout time.Duration `yaml:"timeout"`
}

// TenantEntry names one client key by its SHA-256 (hex).
type TenantEntry struct {
	Name         string `yaml:"name"`
	KeySHA256    string `yaml:"key_sha256"`
	TenantLimits `yaml:",inline"`
}

func defaultAdmission() Admission {
	return Admission{
		Enabled:           true,
		Listen:            "127.0.0.1:8001",
		TTFTTarget:        Automatic(),
		MaxQueue:          1024,
		MaxQueueBytes:     256 << 20,
		MaxQueueWait:      5 * time.Minute,
		Order:             "newest_first",
		IdempotencyHeader: "Idempotency-Key",
		Coalesce:          true,
		CancelAfter:       10 * time.Second,
		MaxMoves:          2,
		SuspectStalls:     true,
		ResultTTL:         2 * time.Minute,
		ResultStoreBytes:  64 << 20,
		RetryRatio:        0.1,
		RetryWindow:       60 * time.Second,
		MaxBodyBytes:      8 << 20,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		ShutdownGrace:     50 * time.Second,
		InjectAPIKey:      true,
		SlowStart:         2 * time.Minute,
	}
}

func (a *Admission) validate(v *validator) {
	if !a.Enabled {
		return
	}
	if v.nonEmpty("admission.listen", a.Listen) {
		v.listenAddr("admission.listen", a.Listen, a.AllowRemote, "admission.allow_remote",
			"the proxy lets every client that reaches it use the engine (with its API key injected)")
	}
	nonNegative(v, "admission.shutdown_grace", a.ShutdownGrace, "")
	nonNegative(v, "admission.max_in_flight", a.MaxInFlight, "0 = automatic")
	nonNegative(v, "admission.engine_max_seqs", a.EngineMaxSeqs, "0 = vLLM's default, 256")
	if a.TTFTTarget.Duration() < 0 {
		v.errorf("admission.ttft_target", "must be >= 0 (0 = no latency objective), or auto")
	}
	nonNegative(v, "admission.max_queue", a.MaxQueue, "")
	nonNegative(v, "admission.max_queue_bytes", a.MaxQueueBytes, "0 = no byte bound")
	v.positive("admission.max_queue_wait", a.MaxQueueWait)
	nonNegative(v, "admission.stream_queue_wait", a.StreamQueueWait, "0 = ttft_target less the engine's time to first token, or 10s without a target")
	seen := map[string]bool{}
	for i, rt := range a.ClientTimeouts {
		p := indexPath("admission.client_timeouts", i)
		switch {
		case !strings.HasPrefix(rt.Path, "/"):
			v.errorf(p+".path", "must be a request path starting with /, e.g. /v1/chat/completions; got %q", rt.Path)
		case seen[rt.Path]:
			v.errorf(p+".path", "%s is listed twice", rt.Path)
		}
		seen[rt.Path] = true
		v.positive(p+".timeout", rt.Timeout)
	}
	if a.Order != "fifo" && a.Order != "newest_first" {
		v.errorf("admission.order", "must be fifo or newest_first; got %q", a.Order)
	}
	v.nonEmpty("admission.idempotency_header", a.IdempotencyHeader)
	nonNegative(v, "admission.cancel_after", a.CancelAfter, "")
	nonNegative(v, "admission.max_moves", a.MaxMoves, "")
	nonNegative(v, "admission.result_ttl", a.ResultTTL, "")
	nonNegative(v, "admission.result_store_bytes", a.ResultStoreBytes, "")
	if a.RetryRatio < 0 || a.RetryRatio > 1 {
		v.errorf("admission.retry_ratio", "must be between 0 and 1")
	}
	v.positive("admission.retry_window", a.RetryWindow)
	if a.MaxBodyBytes < 1024 {
		v.errorf("admission.max_body_bytes", "must be >= 1024")
	}
	v.positive("admission.read_header_timeout", a.ReadHeaderTimeout)
	v.positive("admission.read_timeout", a.ReadTimeout)
	nonNegative(v, "admission.slow_start", a.SlowStart, "")
	checkLimits := func(path string, l TenantLimits) {
		nonNegative(v, path+".rpm", l.RPM, "")
		nonNegative(v, path+".tpm", l.TPM, "")
		nonNegative(v, path+".max_in_flight", l.MaxInFlight, "")
		nonNegative(v, path+".client_timeout", l.ClientTimeout, "0 = not set")
	}
	checkLimits("admission.tenants.default", a.Tenants.Default)
	for i, k := range a.Tenants.Keys {
		p := indexPath("admission.tenants.keys", i)
		v.nonEmpty(p+".name", k.Name)
		if len(k.KeySHA256) != 64 || !isHex(k.KeySHA256) {
			v.errorf(p+".key_sha256", "must be 64 hex digits (sha256sum of the key)")
		}
		checkLimits(p, k.TenantLimits)
	}
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}
