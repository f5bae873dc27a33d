package admission

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/probes"
)

// seatsTries: reads of the engine's seat limit that fail before the
// limiter stops asking (until the engine restarts): a llama-server
// started with --no-slots answers 501 every time.
const seatsTries = 3

// seatState is the engine's seat limit as read (see readSeats).
type seatState struct {
	// known: read, or given up on, since the engine last started.
	known atomic.Bool
	// fails counts failed reads since then (only the poll loop uses it).
	fails int
}

// readSeats reads, once per engine start, the seat limit the engine
// exposes and hands it to the automatic cap (core.Limiter.SetEngineSeats):
// llama.cpp's /slots, one entry per --parallel slot. Every request past
// them waits in llama.cpp's own queue, so they are the cap's ceiling and
// its best start; the queue gauges alone, read four times a second, let
// the cap saw between one and three times the slots (issue 38). vLLM
// exports no such figure (its max_num_seqs is engine_max_seqs in the
// config); SGLang's server info is not read. Called by the poll loop
// once the reader knows the engine's kind.
func (l *Limiter) readSeats() {
	if l.seats.known.Load() || l.reader.Kind() != configs.KindLlamaCpp {
		return
	}
	ctx, cancel := context.WithTimeout(l.base, pollTimeout)
	defer cancel()
	t := probes.Target{URL: strings.TrimSuffix(l.upstream.String(), "/"), HTTP: &http.Client{Transport: l.transport}}
	if l.cfg.InjectAPIKey {
		t.APIKey = l.engineKey
	}
	s, err := probes.ReadSlots(ctx, t)
	if err != nil {
		if l.seats.fails++; l.seats.fails >= seatsTries {
			l.seats.fails = 0
			l.seats.known.Store(true)
			l.log.WithError(err).Warn("admission: cannot read the engine's slots; the automatic cap reads its queue alone")
		}
		return
	}
	l.seats.fails = 0
	l.seats.known.Store(true)
	l.core.SetEngineSeats(s.Total)
}
