// Package actions changes the world on the watchdog's behalf: it drains
// and restores this host at the load balancer, restarts the engine, and
// runs the journaled, guarded recovery sequence that ties them together
// (docs/design.md section 5).
package actions
