// Package enginepoll reads the engine's load for the admission limiter's
// automatic cap: its queue gauges and prefill counters from /metrics, four
// times a second while the cap wants them (requests in flight), backing
// off when they cannot be read; and, once per engine start, the seats a
// llama.cpp engine exposes. It reads through the watchdog's probes.Reader
// (the engine's profile names the series) and feeds what it reads to a Cap
// (package core's Limiter). It decides nothing.
package enginepoll
