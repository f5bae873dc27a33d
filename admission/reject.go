package admission

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/vigil-dev/vigil/admission/core"
)

// Reasons a request is answered by the limiter instead of the engine. They
// label vigil_admission_rejected_total and key Stats.Rejected. The core's
// (package core) are 429 when the client's own quota or retry budget is
// spent, 503 when capacity is.
const (
	ReasonQueueFull      = core.ReasonQueueFull      // 503: the wait queue is at max_queue
	ReasonQueueTimeout   = core.ReasonQueueTimeout   // 503: waited max_queue_wait (or half the client's timeout)
	ReasonRecovering     = core.ReasonRecovering     // 503: the engine is being restarted
	ReasonStreamDeadline = core.ReasonStreamDeadline // 503: the queue would not reach a stream within its bound
	ReasonTenantRPM      = core.ReasonTenantRPM      // 429: the key's requests per minute
	ReasonTenantTPM      = core.ReasonTenantTPM      // 429: the key's tokens per minute
	ReasonTenantInFlight = core.ReasonTenantInFlight // 429: the key's concurrent requests
	ReasonRetryBudget    = core.ReasonRetryBudget    // 429: retries over retry_ratio of first attempts
	ReasonBodyTooLarge   = "body_too_large"          // 413
	ReasonInvalidJSON    = "invalid_json"            // 400
	ReasonBadBody        = "bad_body"                // 400/408: the body could not be read
)

var allReasons = append(slices.Clone(core.Reasons), ReasonBodyTooLarge, ReasonInvalidJSON, ReasonBadBody)

// maxRetryAfter is the longest wait the official OpenAI SDKs honour.
const maxRetryAfter = core.MaxRetryAfter

// rejection is one answer the limiter gives in the engine's place.
type rejection struct {
	status  int
	reason  string
	typ     string
	message string
	wait    time.Duration
	// final: a retry cannot help (x-should-retry: false).
	final bool
}

// Write sends the rejection in OpenAI's error shape, with the headers the
// OpenAI SDKs act on: retry-after-ms first, then Retry-After (both at most
// 60 s, so they are obeyed rather than ignored), and x-should-retry.
func (rj *rejection) Write(w http.ResponseWriter) {
	h := w.Header()
	wait := min(max(rj.wait, time.Second), maxRetryAfter)
	// Spread the retries of everyone rejected together by up to 20%, still
	// within the 60 s the SDKs honour.
	wait = min(maxRetryAfter, wait+time.Duration(rand.Float64()*0.2*float64(wait)))
	h.Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
	h.Set("Retry-After-Ms", strconv.FormatInt(wait.Milliseconds(), 10))
	h.Set("X-Should-Retry", strconv.FormatBool(!rj.final))
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(rj.status)
	_ = json.NewEncoder(w).Encode(errorBody{Error: errorDetail{Message: rj.message, Type: rj.typ, Code: rj.reason}})
}

// fromCore answers a core rejection: 429 rate_limit_error when the client
// spent its own quota or retry budget, 503 server_error when capacity ran
// out.
func fromCore(r *core.Rejection) *rejection {
	rj := &rejection{status: http.StatusServiceUnavailable, reason: r.Reason, typ: "server_error",
		message: r.Message, wait: r.Wait, final: r.Final}
	if r.RateLimited() {
		rj.status, rj.typ = http.StatusTooManyRequests, "rate_limit_error"
	}
	return rj
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}
