package core

import "time"

// Reasons the core turns a request away. The transport answers each in its
// own terms (package admission: OpenAI-shaped errors, 429 or 503).
const (
	ReasonQueueFull      = "queue_full"       // the wait queue is at max_queue (or max_queue_bytes)
	ReasonQueueTimeout   = "queue_timeout"    // waited max_queue_wait (or half the client's timeout)
	ReasonRecovering     = "recovering"       // the engine is being restarted
	ReasonStreamDeadline = "stream_deadline"  // a stream the queue would not reach within its bound
	ReasonTenantRPM      = "tenant_rpm"       // the key's requests per minute
	ReasonTenantTPM      = "tenant_tpm"       // the key's tokens per minute
	ReasonTenantInFlight = "tenant_in_flight" // the key's concurrent requests
	ReasonRetryBudget    = "retry_budget"     // retries over retry_ratio of first attempts
)

const (
	reasonTenantRPM      = ReasonTenantRPM
	reasonTenantTPM      = ReasonTenantTPM
	reasonTenantInFlight = ReasonTenantInFlight
)

// Reasons lists every reason the core gives, for counters keyed by it.
var Reasons = []string{ReasonQueueFull, ReasonQueueTimeout, ReasonRecovering, ReasonStreamDeadline, ReasonTenantRPM,
	ReasonTenantTPM, ReasonTenantInFlight, ReasonRetryBudget}

// MaxRetryAfter is the longest wait the official OpenAI SDKs honour; past
// it they ignore the header and fall back to their own short backoff.
const MaxRetryAfter = 60 * time.Second

// Rejection is a request turned away, and when it is worth trying again.
type Rejection struct {
	Reason  string
	Message string // for the client, in plain words
	// Wait is the honest delay before a retry can succeed (0: unknown).
	Wait time.Duration
	// Final: a retry cannot help (the request can never fit its quota).
	Final bool
}

func (r *Rejection) Error() string { return "admission: rejected (" + r.Reason + "): " + r.Message }

// RateLimited tells a rejection the client brought on itself (its key's
// quotas, the retry budget: HTTP 429) from one of capacity (the queue, a
// restarting engine: HTTP 503).
func (r *Rejection) RateLimited() bool {
	switch r.Reason {
	case ReasonTenantRPM, ReasonTenantTPM, ReasonTenantInFlight, ReasonRetryBudget:
		return true
	}
	return false
}
