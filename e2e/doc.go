// Package e2e holds vigil's end-to-end recovery tests: the real vigil
// binary, run as a subprocess, drains a real HAProxy, restarts a real
// Docker container holding the simulated engine and restores it gradually,
// and survives its own SIGKILL mid-recovery; bad infrastructure gives a
// clear error and never a restart of an undrained host; a pool of vigils
// takes turns at recovering through a real etcd (pool_test.go).
//
// The tests start their own dockerd, HAProxy and etcd (internal/testinfra)
// and skip loudly when the host cannot run them (they fail instead under
// VIGIL_REQUIRE_DOCKER=1, VIGIL_REQUIRE_HAPROXY=1 and VIGIL_REQUIRE_ETCD=1),
// and are skipped with -short.
package e2e
