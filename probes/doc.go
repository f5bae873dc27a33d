// Package probes takes one observation of an inference engine per call:
// /v1/models, /health, a /metrics scrape, or an asynchronous two-token
// completion, each typed, timed and with its failure classified.
//
// A probe never decides anything. It says what it saw (a status code, a
// parsed metric set, a latency) and, when it failed, how: refused, reset,
// timeout, an HTTP status, or other. The watchdog turns those into a
// verdict; keeping the two apart is what lets the classifier be a pure
// function tested without a network.
//
// The shape follows prometheus/blackbox_exporter's prober package: one
// function type (ProbeFn), one file and one test file per kind.
package probes
