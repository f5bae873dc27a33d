package probes

import (
	"context"
	"encoding/json"
	"net/http"
)

// EndpointSleeping is vLLM's sleep-mode query: {"is_sleeping": true} while
// the engine was put to sleep on purpose (POST /sleep), its weights
// offloaded, until POST /wake_up. An engine without sleep mode answers
// 404.
const EndpointSleeping = "/is_sleeping"

// Sleeping asks the engine whether it was put to sleep. known is false
// when it does not say (no such endpoint, an error, a body that is not
// the answer): a missing sleep mode is no sign of anything.
func Sleeping(ctx context.Context, t Target) (asleep, known bool) {
	req, err := http.NewRequest(http.MethodGet, t.url(EndpointSleeping), nil)
	if err != nil {
		return false, false
	}
	req.Header.Set("Accept", "application/json")
	obs, _, body := do(ctx, t, req, EndpointSleeping)
	if !obs.OK() {
		return false, false
	}
	var ans struct {
		IsSleeping *bool `json:"is_sleeping"`
	}
	if json.Unmarshal(body, &ans) != nil || ans.IsSleeping == nil {
		return false, false
	}
	return *ans.IsSleeping, true
}

// Sleeping asks the engine whether it was put to sleep on purpose.
func (c *Client) Sleeping(ctx context.Context) (asleep, known bool) { return Sleeping(ctx, c.target) }
