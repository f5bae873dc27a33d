// Command vllm-sim serves the simulated vLLM engine of package enginesim on
// real ports: the OpenAI-compatible API (default 127.0.0.1:8000, refusing
// connections until -load-time has passed) and the fault-control API
// (default 127.0.0.1:8100: POST /fault/hang, /fault/crash,
// /fault/slow?factor=N, /fault/clear; GET /fault).
//
// It is built static (CGO_ENABLED=0) and reads no file at startup but the
// optional -api-key-file, so it runs alone in a container made by
// `docker import`. Exit codes: 0 on SIGTERM/SIGINT, 1 when crashed by
// /fault/crash (as a vLLM whose engine core died), 2 on bad flags.
//
// With the default cost model the engine completes about 2.80 calls/s
// (engine time) of 12,000-token prompts sharing a 2,000-token prefix with
// 300-token answers; see package enginesim.
package main
