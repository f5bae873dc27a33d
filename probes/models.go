package probes

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// EndpointModels is the OpenAI model list; 200 with a model list means the
// API server is alive. It stays 200 while the engine core is hung.
const EndpointModels = "/v1/models"

// ModelsObservation is one GET /v1/models.
type ModelsObservation struct {
	Observation
	// Models are the served model ids, in the engine's order.
	Models []string `json:"models,omitempty"`
	// MaxModelLen is the first model's context length when the engine
	// says it (vLLM's max_model_len; 0: not said): the longest prompt it
	// can be given, which sizes the hang window for work vigil did not
	// send.
	MaxModelLen int `json:"max_model_len,omitempty"`
}

// First is the first model listed ("" if none): the completion probe's
// model when the config names none.
func (m ModelsObservation) First() string {
	if len(m.Models) == 0 {
		return ""
	}
	return m.Models[0]
}

// String adds the first model to the outcome: "200 in 4ms (llama-3)".
func (m ModelsObservation) String() string {
	if m.OK() && m.First() != "" {
		return fmt.Sprintf("%s (%s)", m.Observation.String(), m.First())
	}
	return m.Observation.String()
}

var _ ProbeFn[ModelsObservation] = Models

// Models lists the served models. A 200 whose body is not a model list, or
// lists none, is a failure of class other: an API server that serves no
// model is not ready.
func Models(ctx context.Context, t Target) ModelsObservation {
	req, err := http.NewRequest(http.MethodGet, t.url(EndpointModels), nil)
	if err != nil {
		return ModelsObservation{Observation: fail(Observation{Endpoint: EndpointModels}, err)}
	}
	req.Header.Set("Accept", "application/json")
	obs, _, body := do(ctx, t, req, EndpointModels)
	out := ModelsObservation{Observation: obs}
	if !obs.OK() {
		return out
	}
	var list struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		out.Class, out.Error = ClassOther, fmt.Sprintf("not a model list: %v: %s", err, snippet(body))
		return out
	}
	for _, m := range list.Data {
		if m.ID != "" {
			if len(out.Models) == 0 {
				out.MaxModelLen = max(m.MaxModelLen, 0)
			}
			out.Models = append(out.Models, m.ID)
		}
	}
	if len(out.Models) == 0 {
		out.Class, out.Error = ClassOther, "no models listed"
	}
	return out
}
