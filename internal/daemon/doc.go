// Package daemon is what `vigil run` runs: every part wired from one
// config (pager, limiter, recovery, watchdog, overrides, status listener,
// pool glue), run under one supervisor that stops them all on the first
// failure, reloaded on SIGHUP, and told to systemd (sd_notify, socket
// activation, the installed unit's limits). cmd/vigil-demo runs the same
// daemon in process (New) on a simulated engine; the daemon links
// nothing of the simulation.
package daemon
