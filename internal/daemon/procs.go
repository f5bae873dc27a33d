package daemon

import (
	"os"
	"runtime"
)

// Procs is how many threads run vigil's Go code (GOMAXPROCS) in "vigil run"
// unless the environment sets GOMAXPROCS.
//
// vigil's work is I/O, a few hundred requests a second at most beside an
// LLM engine. With one thread, the goroutine hand-offs of a proxied request
// (net/http's server starts and stops a background reader for each) stay
// on that thread; with more, each one wakes another thread (futex, then the
// scheduler), which on a loopback path costs more than the request's own
// work (bench/README.md, overhead). One thread also keeps vigil off the
// cores the engine's own CPU-bound threads (its scheduler, tokenizer) need.
const Procs = 1

// SetProcs sets GOMAXPROCS to Procs unless the environment sets it, and
// returns the value in force.
func SetProcs() int {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(Procs)
	}
	return runtime.GOMAXPROCS(0)
}
