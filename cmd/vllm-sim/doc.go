// Command vllm-sim serves the simulated vLLM engine of package enginesim on
// real ports: the OpenAI-compatible API (default 127.0.0.1:8000, refusing
// connections until -load-time has passed) and the fault-control API
// (default 127.0.0.1:8100):
//
//	POST /fault/hang[?rank=N]              every rank, or rank N alone, stops stepping
//	POST /fault/decode-stall               prefill goes on, no second token
//	POST /fault/wedge                      no API endpoint answers
//	POST /fault/error?endpoint=P&code=C    endpoint P answers C (default 503)
//	POST /fault/slow?factor=N, /fault/crash, /fault/clear
//	GET  /fault                            the faults in force and the engine's stats
//
// -data-parallel N runs N engine ranks, as vLLM --data-parallel-size: every
// per-engine series carries engine="0".."N-1" in the one /metrics, and
// requests are dealt round-robin (so a hung rank keeps its share stuck).
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
