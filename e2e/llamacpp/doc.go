// Package llamacpp holds vigil's tests against a real engine: llama.cpp's
// llama-server, CPU only, built from source by build.sh (once per machine,
// cached outside the repository) and serving a tiny random-weight model
// tinymodel.py writes. Every other verdict, limiter and recovery test runs
// against enginesim, vigil's own simulation of vLLM; these check the same
// states on an engine vigil's authors did not write: idle HEALTHY and the
// kind detected, overload SATURATED and never HUNG, SIGSTOP HUNG and
// recovered by a restart command with no call lost through the limiter,
// SIGKILL DOWN, a late start LOADING, the automatic cap settling at the
// engine's slots, every figure `vigil diagnose` prints, and a containerised
// llama-server frozen and restarted by restart.kind docker.
//
// The tests skip loudly without the build, and fail instead under CI=true
// or VIGIL_REQUIRE_LLAMACPP=1 (./test.sh builds it first).
package llamacpp
