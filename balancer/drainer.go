package balancer

import (
	"context"
	"fmt"

	"github.com/vigil-dev/vigil/configs"
)

// Drainer takes this host out of the load balancer's rotation and puts it
// back. Every call honours the caller's context.
type Drainer interface {
	// Drain stops new requests reaching this host; requests in flight may
	// finish.
	Drain(ctx context.Context) error
	// Ready puts the host back into rotation.
	Ready(ctx context.Context) error
	// SetWeight sets the host's share of traffic as a percentage of its
	// configured weight (1..100), for the ramp after a restart.
	SetWeight(ctx context.Context, percent int) error
	// State reads this host's and its pool's state at the load balancer.
	// Drainers that cannot read it return a State with Known false.
	State(ctx context.Context) (State, error)
	// String names the drainer and its target for logs and pages, e.g.
	// "haproxy vllm/node1".
	String() string
}

// State is what the load balancer says about this host and the other
// servers of its backend. It is the pool lock: a server that is drained
// is being worked on, and only one member of a pool may be.
type State struct {
	// Known is false when the drainer cannot read the load balancer's
	// state (an HTTP hook, or no load balancer at all).
	Known bool `json:"known"`
	// Self is this host's server.
	Self ServerStatus `json:"self"`
	// Others are the other servers of the same backend, sorted by name.
	Others []ServerStatus `json:"others,omitempty"`
}

// ServerStatus is one server as the load balancer sees it.
type ServerStatus struct {
	Backend string `json:"backend"`
	Server  string `json:"server"`
	// Status is the load balancer's own word, e.g. UP, DOWN, DRAIN, MAINT,
	// "no check". A drained server whose health check fails says DOWN, so
	// use Drained, not Status, to know whether it is drained.
	Status string `json:"status"`
	// Drained is set when an operator (or vigil) forced the server into
	// drain mode; Maint when it was forced into maintenance.
	Drained bool `json:"drained"`
	Maint   bool `json:"maint"`
	// Sessions are the requests in flight on the server (scur), Queued the
	// requests waiting for it at the load balancer (qcur).
	Sessions int `json:"sessions"`
	Queued   int `json:"queued"`
	// Weight is the effective weight now; InitialWeight the configured one
	// (100% of a ramp). InitialWeight is 0 when unknown.
	Weight        int `json:"weight"`
	InitialWeight int `json:"initial_weight,omitempty"`
}

// WeightPercent is the server's weight as a percentage of its configured
// weight, or -1 when the configured weight is unknown.
func (s ServerStatus) WeightPercent() int {
	if s.InitialWeight <= 0 {
		return -1
	}
	return s.Weight * 100 / s.InitialWeight
}

// Out reports whether the server is out of rotation by an operator's (or
// vigil's) hand.
func (s ServerStatus) Out() bool { return s.Drained || s.Maint }

// Server is a drainer the balancer polls (healthcheck, agent): it must be
// served for the balancer to learn anything, and closed when done.
type Server interface {
	Drainer
	// Serve answers polls until ctx ends (nil) or the listener fails.
	Serve(ctx context.Context) error
	// StartDrained makes the first answer "drained" without waiting for
	// any poll: vigil left the host drained (its journal says so) and the
	// resumed recovery has not run yet, so a poll must not put it back.
	StartDrained()
	// Close releases the listener.
	Close() error
}

// NewDrainer builds the drainer load_balancer.kind asks for. The polled
// kinds bind their listener here and return a Server.
func NewDrainer(cfg configs.LoadBalancer) (Drainer, error) {
	switch cfg.Kind {
	case "haproxy":
		if len(cfg.HAProxy.Sockets) > 1 {
			return NewHAProxySet(cfg.HAProxy)
		}
		if len(cfg.HAProxy.Sockets) == 1 {
			cfg.HAProxy.Socket = cfg.HAProxy.Sockets[0]
		}
		return NewHAProxy(cfg.HAProxy)
	case "http":
		return NewHTTPHooks(cfg.HTTP, nil), nil
	case "healthcheck":
		return NewHealthCheck(cfg.HealthCheck, nil)
	case "agent":
		return NewAgent(cfg.Agent, nil)
	case "none", "":
		return NoDrain{}, nil
	default:
		return nil, fmt.Errorf("balancer: unknown load_balancer.kind %q (want haproxy, http, healthcheck, agent or none)", cfg.Kind)
	}
}

// NoDrain is the drainer for hosts without a load balancer: every call
// succeeds and changes nothing, and String says so.
type NoDrain struct{}

// Drain does nothing: there is no load balancer to tell.
func (NoDrain) Drain(context.Context) error { return nil }

// Ready does nothing.
func (NoDrain) Ready(context.Context) error { return nil }

// SetWeight does nothing.
func (NoDrain) SetWeight(context.Context, int) error { return nil }

// State returns an unknown state.
func (NoDrain) State(context.Context) (State, error) { return State{}, nil }

func (NoDrain) String() string { return "none (no load balancer configured: nothing to drain)" }
