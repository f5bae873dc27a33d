package configs

import (
	"net"
	"strconv"
	"strings"
	"time"
)

// HealthCheck is the endpoint for load balancers that drain by an active
// HTTP check (load_balancer.kind healthcheck): 200 while the host should
// take traffic, 503 with the reason while it should not.
type HealthCheck struct {
	// Listen is its own listener, loopback by default. A balancer on
	// another host needs an address it can reach; the endpoint only says
	// whether to send traffic, so no allow_remote is asked for.
	Listen string `yaml:"listen"`
	// Path is the one path answered; any other is 404.
	Path string `yaml:"path"`
}

// Agent answers HAProxy's agent-check protocol (load_balancer.kind agent)
// on its own port: "up ready N%" while serving, "drain" while drained.
type Agent struct {
	// Listen is host:port; its port is the agent-port on each server line.
	Listen string `yaml:"listen"`
	// ExpectPolls, when > 0, makes a drain wait until that many distinct
	// pollers (told apart by the agent-send line, else by address) have
	// been answered "drain"; fewer within ExpectWithin fails the drain, so
	// the engine is not restarted while a balancer still sends it traffic.
	ExpectPolls int `yaml:"expect_polls"`
	// ExpectWithin bounds that wait (a few agent-inter periods).
	ExpectWithin time.Duration `yaml:"expect_within"`
}

func defaultAgent() Agent {
	return Agent{Listen: "127.0.0.1:9112", ExpectWithin: 10 * time.Second}
}

func (a *Agent) validate(v *validator) {
	v.hostPort("load_balancer.agent.listen", a.Listen)
	nonNegative(v, "load_balancer.agent.expect_polls", a.ExpectPolls, "0: do not wait for the pollers")
	if a.ExpectPolls > 0 {
		v.positive("load_balancer.agent.expect_within", a.ExpectWithin)
	}
}

func defaultHealthCheck() HealthCheck {
	return HealthCheck{Listen: "127.0.0.1:9111", Path: "/ready"}
}

func (h *HealthCheck) validate(v *validator) {
	v.hostPort("load_balancer.healthcheck.listen", h.Listen)
	if !strings.HasPrefix(h.Path, "/") {
		v.errorf("load_balancer.healthcheck.path", "must start with /, got %q", h.Path)
	}
}

// hostPort checks a listen address with a fixed port: a balancer is told
// the port, so ":0" (any free port) cannot work.
func (v *validator) hostPort(path, addr string) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.errorf(path, "must be host:port: %v", err)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		v.errorf(path, "port must be 1..65535 (the balancer is told it), got %q", port)
	}
}
