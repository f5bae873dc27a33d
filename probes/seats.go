package probes

import (
	"context"
	"sync/atomic"

	"github.com/vigil-dev/vigil/configs"
)

// seatsTries: reads of the engine's seat limit that fail before the
// reader stops asking (until the engine restarts): a llama-server started
// with --no-slots answers 501 every time.
const seatsTries = 3

// Seats reads, once per engine start, the seat limit the engine exposes:
// llama.cpp's /slots, one entry per --parallel slot. vLLM exports no such
// figure (its max_num_seqs is engine_max_seqs in the config); SGLang's
// server info is not read. The zero value is ready; Due and Read are for
// one goroutine, Reset for any.
type Seats struct {
	// known: read, or given up on, since the engine last started.
	known atomic.Bool
	// fails counts failed reads since then.
	fails int
}

// Reset has the seats read again: the engine restarted.
func (s *Seats) Reset() { s.known.Store(false) }

// Due reports whether the seats of an engine of kind are still to read.
func (s *Seats) Due(kind string) bool { return !s.known.Load() && kind == configs.KindLlamaCpp }

// Read asks t's /slots once: n is the seat limit read (0: none). err is
// set only when the reader gives up, after seatsTries failed reads in a
// row.
func (s *Seats) Read(ctx context.Context, t Target) (n int, err error) {
	sl, err := ReadSlots(ctx, t)
	if err != nil {
		if s.fails++; s.fails >= seatsTries {
			s.fails = 0
			s.known.Store(true)
			return 0, err
		}
		return 0, nil
	}
	s.fails = 0
	s.known.Store(true)
	return sl.Total, nil
}
