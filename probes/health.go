package probes

import (
	"context"
	"net/http"
)

// EndpointHealth answers 200 while the engine core lives; vLLM answers 503
// once the core died (and exits within seconds). It stays 200 while hung.
const EndpointHealth = "/health"

var _ ProbeFn[Observation] = Health

// Health checks /health: any 2xx is healthy.
func Health(ctx context.Context, t Target) Observation {
	req, err := http.NewRequest(http.MethodGet, t.url(EndpointHealth), nil)
	if err != nil {
		return fail(Observation{Endpoint: EndpointHealth}, err)
	}
	obs, _, _ := do(ctx, t, req, EndpointHealth)
	return obs
}
