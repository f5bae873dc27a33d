package admission

import (
	"context"
	"net/http"
	"strings"

	"github.com/vigil-dev/vigil/probes"
)

// readSeats reads, once per engine start (probes.Seats), the seat limit
// the engine exposes and hands it to the automatic cap
// (core.Limiter.SetEngineSeats). Every request past llama.cpp's slots
// waits in its own queue, so they are the cap's ceiling and its best
// start; the queue gauges alone, read four times a second, let the cap
// saw between one and three times the slots (issue 38). Called by the
// poll loop once the reader knows the engine's kind.
func (l *Limiter) readSeats() {
	if !l.seats.Due(l.reader.Kind()) {
		return
	}
	ctx, cancel := context.WithTimeout(l.base, pollTimeout)
	defer cancel()
	t := probes.Target{URL: strings.TrimSuffix(l.upstream.String(), "/"), HTTP: &http.Client{Transport: l.transport}}
	if l.cfg.InjectAPIKey {
		t.APIKey = l.engineKey
	}
	n, err := l.seats.Read(ctx, t)
	switch {
	case err != nil:
		l.log.WithError(err).Warn("admission: cannot read the engine's slots; the automatic cap reads its queue alone")
	case n > 0:
		l.core.SetEngineSeats(n)
	}
}
