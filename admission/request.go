package admission

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// This file reads what the core needs from an HTTP request: who sent it,
// how much work it asks for, whether it is a retry and how long its client
// waits. The core (package core) sees only a core.Request.

// defaultMaxTokens stands in for an absent max_tokens in the token
// estimate; the charge is corrected from the answer's usage.
const defaultMaxTokens = 256

// requestInfo is what admission needs from a request body.
type requestInfo struct {
	Stream              bool            `json:"stream"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            json.RawMessage `json:"messages"`
	Input               json.RawMessage `json:"input"`
}

// estimateTokens charges a request before the engine has seen it: about 4
// bytes a token of the prompt (or of the whole body), plus max_tokens.
func estimateTokens(body []byte, info *requestInfo) (prompt, total int) {
	n := len(info.Prompt) + len(info.Messages) + len(info.Input)
	if n == 0 {
		n = len(body)
	}
	prompt = max(1, (n+3)/4)
	out := defaultMaxTokens
	switch {
	case info.MaxTokens != nil:
		out = *info.MaxTokens
	case info.MaxCompletionTokens != nil:
		out = *info.MaxCompletionTokens
	}
	return prompt, prompt + max(0, out)
}

// tenantKey identifies a client by the SHA-256 of its bearer key, the same
// form the config lists keys in; the key itself is never kept.
func tenantKey(r *http.Request) string {
	auth := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		tok, _ = strings.CutPrefix(auth, "bearer ")
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return hex.EncodeToString(sum[:])
}

// stainlessRetryCount is the attempt number an OpenAI SDK announces
// (X-Stainless-Retry-Count: 0 on the first attempt), or -1.
func stainlessRetryCount(r *http.Request) int {
	v := r.Header.Get("X-Stainless-Retry-Count")
	if v == "" {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// clientTimeout is the timeout an OpenAI SDK announces for this attempt
// (X-Stainless-Timeout, seconds), or 0.
func clientTimeout(r *http.Request) time.Duration {
	v := r.Header.Get("X-Stainless-Timeout")
	if v == "" {
		return 0
	}
	s, err := strconv.ParseFloat(v, 64)
	if err != nil || !(s > 0 && s <= 1e6) { // NaN fails both
		return 0
	}
	return time.Duration(s * float64(time.Second))
}
