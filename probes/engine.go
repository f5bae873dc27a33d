package probes

import (
	"context"
	"errors"
	"fmt"
	"sync"

	dto "github.com/prometheus/client_model/go"

	"github.com/vigil-dev/vigil/configs"
)

// engineNames picks the metric names a scrape is read by for engine.kind
// auto: vLLM's (with the file's own keys) until a scrape's families show
// which engine it is, then that engine's preset for good. An engine does
// not change kind under a running vigil; a restart of vigil looks again.
type engineNames struct {
	resolve func(kind string) configs.MetricNames

	mu    sync.Mutex
	kind  string
	names configs.MetricNames
}

func newEngineNames(provisional configs.MetricNames, resolve func(string) configs.MetricNames) *engineNames {
	return &engineNames{resolve: resolve, names: provisional}
}

func (e *engineNames) pick(fams map[string]*dto.MetricFamily) (configs.MetricNames, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kind == "" {
		if k, ok := configs.DetectKind(FamilyNames(fams)); ok {
			e.kind, e.names = k, e.resolve(k)
		}
	}
	return e.names, e.kind
}

func (e *engineNames) current() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.kind
}

// ErrUnknownEngine is wrapped by DetectEngine's error when the scrape has
// none of the known engines' metrics.
var ErrUnknownEngine = errors.New("no known engine's metrics")

// DetectEngine scrapes /metrics once and says which engine kind exports
// it, with the families it saw. An unreadable scrape is an error; a
// readable one of no known engine wraps ErrUnknownEngine and still
// returns the families.
func DetectEngine(ctx context.Context, t Target) (kind string, families []string, err error) {
	obs, fams := fetchFamilies(ctx, t)
	if !obs.OK() {
		if obs.Class == ClassOther && obs.Error != "" {
			return "", nil, errors.New(obs.Error)
		}
		return "", nil, fmt.Errorf("metrics: %s", obs)
	}
	families = FamilyNames(fams)
	kind, ok := configs.DetectKind(families)
	if !ok {
		return "", families, fmt.Errorf("metrics: %w (%v); the scrape has %s", ErrUnknownEngine, configs.Kinds, familyWords(families))
	}
	return kind, families, nil
}
