package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/probes"
)

// EngineKind is what vigil knows of the engine's kind before it starts
// watching: the kind whose names it reads, and how that was decided.
type EngineKind struct {
	// Engine is the engine section with the kind's names resolved when
	// the kind is known; with auto and no readable scrape it is as
	// configured, and the watchdog's scrapes decide.
	Engine configs.Engine
	// Kind is "" while not known.
	Kind string
	// Words say how it was decided, for the start-up log and diagnose.
	Words string
	// Families are the scrape's metric families when no known engine
	// exports them.
	Families []string
}

// detectWait bounds the start-up scrape that picks the kind: an engine
// that does not answer quickly is left to the watchdog's own scrapes.
const detectWait = 5 * time.Second

// ResolveEngineKind scrapes the engine once when engine.kind is auto
// (start-up and diagnose).
func ResolveEngineKind(ctx context.Context, e configs.Engine) EngineKind {
	if e.Kind != configs.KindAuto {
		return EngineKind{Engine: e, Kind: e.Kind, Words: e.Kind + " (engine.kind)"}
	}
	ctx, cancel := context.WithTimeout(ctx, min(e.RequestTimeout, detectWait))
	defer cancel()
	kind, fams, err := probes.DetectEngine(ctx, probes.Target{URL: e.URL, APIKey: e.APIKey})
	switch {
	case err == nil:
		e.Kind, e.Metrics = kind, e.MetricsFor(kind)
		return EngineKind{Engine: e, Kind: kind, Words: kind + " (engine.kind auto: picked from the metric families of the first scrape)"}
	case errors.Is(err, probes.ErrUnknownEngine):
		return EngineKind{Engine: e, Families: fams,
			Words: fmt.Sprintf("unknown (engine.kind auto: %v; set engine.kind, or engine.metrics for another engine)", err)}
	}
	return EngineKind{Engine: e,
		Words: fmt.Sprintf("not known yet (engine.kind auto: %v; the first readable scrape will decide, reading vLLM's names until then)", err)}
}
