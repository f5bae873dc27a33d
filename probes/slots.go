package probes

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// EndpointSlots is llama.cpp's per-slot state (llama-server --slots, on by
// default in recent builds). vLLM and SGLang have no such endpoint.
const EndpointSlots = "/slots"

// Slots is what llama.cpp's /slots says: how many requests the engine runs
// at once (its --parallel), and how many it was running. vLLM exports no
// such figure (max_num_seqs is configured, not exported), so on llama.cpp
// it is the engine's measured capacity without Little's law.
type Slots struct {
	Total      int `json:"total"`
	Processing int `json:"processing"`
}

// ReadSlots asks /slots once.
func ReadSlots(ctx context.Context, t Target) (Slots, error) {
	req, err := http.NewRequest(http.MethodGet, t.url(EndpointSlots), nil)
	if err != nil {
		return Slots{}, err
	}
	obs, _, body := do(ctx, t, req, EndpointSlots)
	if !obs.OK() {
		return Slots{}, fmt.Errorf("slots: %s", obs)
	}
	var slots []struct {
		ID           *int `json:"id"`
		IsProcessing bool `json:"is_processing"`
	}
	if err := json.Unmarshal(body, &slots); err != nil {
		return Slots{}, fmt.Errorf("slots: not llama.cpp's slot list: %w: %s", err, snippet(body))
	}
	var s Slots
	for _, sl := range slots {
		if sl.ID == nil {
			return Slots{}, fmt.Errorf("slots: an entry without an id: %s", snippet(body))
		}
		s.Total++
		if sl.IsProcessing {
			s.Processing++
		}
	}
	if s.Total == 0 {
		return Slots{}, fmt.Errorf("slots: empty list: %s", snippet(body))
	}
	return s, nil
}
