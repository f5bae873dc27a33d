// Package balancer holds the load-balancer drivers: how vigil takes this
// host out of rotation, ramps its weight back and puts it back in, and
// reads the pool's state (which member is drained: the pool's lock).
//
// Each driver is a Drainer, built by kind with NewDrainer:
//
//   - HAProxy (haproxy.go) drives one HAProxy's runtime API over its
//     socket; HAProxySet (haproxyset.go) drives several at once, as a
//     pair behind keepalived is.
//   - HTTPHooks (httphook.go) calls an operator's URLs.
//   - Agent (agent.go) answers HAProxy's agent-check, and HealthCheck
//     (healthcheck.go) an HTTP health check: the balancer polls them,
//     and they tell it what advertised.go holds.
//   - NoDrain drains nothing.
//
// The recovery sequence (package recoverer) drives them; vigil's
// drain and ready commands do too.
package balancer
