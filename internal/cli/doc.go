// Package cli is the vigil command: its flags and subcommands (run, which
// hands over to internal/daemon; diagnose; override; check-config; demo,
// which runs vigil-demo; version). cmd/vigil is only its entry point.
package cli
