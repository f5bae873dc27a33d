// Command hangdetect measures how fast vigil's watchdog calls a hang under
// load with hang_after: auto against the fixed 3 minutes, and that auto
// calls no legitimate silence a hang over a long run (issue 25's bench).
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
//	go run ./bench/hangdetect [-workload both] [-reps 3] [-duration 20m] [-scale 25]
package main
