// Package harness is what vigil's benchmarks share beyond the simulated
// clients (internal/simclient): open-loop arrivals, workload draws, the
// paper's overload experiment (paper.go), percentiles, a private HAProxy
// and its runtime API.
//
// Durations a benchmark reasons about are engine time (the simulated
// engine's clock, enginesim.Config.Scale times faster than the wall);
// simclient.Clock converts between the two so that a paper's "120 s
// timeout" stays 120 s of engine time however fast the run goes.
package harness
