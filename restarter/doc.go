// Package restarter restarts the engine and tells when it last started:
// Docker (docker.go, through the Docker API), a systemd unit or an
// operator's command (restarter.go), or nothing (NoRestart). New
// builds one by restart.kind.
//
// The start time is what keeps a restart from running twice: the
// recovery sequence (package recoverer) compares it across a
// restart, and across a vigil that died mid-restart, before it restarts
// again.
package restarter
