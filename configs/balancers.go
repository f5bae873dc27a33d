package configs

import (
	"net"
	"strconv"
	"strings"
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
