// Package status is vigil's own localhost HTTP listener (/metrics,
// /status, /healthz and the override API) and the client the CLI uses to
// talk to it.
package status
