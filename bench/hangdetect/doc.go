// Command hangdetect measures how fast vigil's watchdog calls a hang with
// its defaults (hang_after: auto) against the old defaults' outcome (the
// fixed 3 minutes, a 15 s cycle), and that auto calls no legitimate
// silence a hang over a long run (issue 25's bench). Issue 37 added the
// arms (-arms): load (open-loop through the limiter after the warm-up),
// light (one client at a time), firstminute (the hang 40 s after vigil
// started) and around (the load sent straight at the engine, not through
// the limiter); and the false-hang battery (-battery): a lone 100k-token
// prefill, cached-prefix calls then an uncached 100k prompt, a 20x
// slowdown under load, a burst after 10 minutes idle, vLLM's sleep mode
// with calls held, a 100k prompt sent around the limiter.
//
// Both for two workloads at about the simulated engine's capacity: chat
// (prompts 2,000 ± 1,000 tokens) and long-prompt (12,000 ± 1,200 tokens
// sharing a 2,000-token prefix), answers lognormal around 300 tokens. Each
// run is built from vigil's real parts in-process: the simulated engine
// (enginesim) behind httptest, the admission limiter in front of it with
// its defaults, and a watchdog with the defaults reading the limiter's
// work in flight (Options.LimiterLoad), as the daemon wires them.
//
// Everything is time-scaled: the engine runs -scale times faster than the
// wall, the limiter keeps engine time (admission.WithClock), and every
// duration of the watchdog's config is divided by -scale. Every figure
// printed is engine time, i.e. what a real engine would see.
//
// The engine's prefill-time histogram is served in wall seconds (the
// watchdog keeps wall time beside the scaled engine).
//
//	go run ./bench/hangdetect [-workload both] [-arms load,light,firstminute,around] [-battery] [-reps 3] [-duration 20m] [-scale 25]
package main
