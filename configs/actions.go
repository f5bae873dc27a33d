package configs

import (
	"net/url"
	"strings"
	"time"
)

// LoadBalancer says how to drain this host before a restart and restore it
// afterwards (docs/design.md section 5).
type LoadBalancer struct {
	// Kind: haproxy, http, healthcheck, agent or none.
	Kind        string      `yaml:"kind"`
	HAProxy     HAProxy     `yaml:"haproxy"`
	HTTP        HTTPDrainer `yaml:"http"`
	HealthCheck HealthCheck `yaml:"healthcheck"`
	Agent       Agent       `yaml:"agent"`
	// DrainTimeoutHung: how long to wait for in-flight requests to leave
	// before restarting a hung engine (they never finish, so keep it short).
	DrainTimeoutHung time.Duration `yaml:"drain_timeout_hung"`
	// DrainTimeoutPlanned: the same for a planned restart.
	DrainTimeoutPlanned time.Duration `yaml:"drain_timeout_planned"`
	// RampWeights are the weights (percent) traffic is restored through,
	// spread evenly over RampDuration. The last must be 100.
	RampWeights  []int         `yaml:"ramp_weights"`
	RampDuration time.Duration `yaml:"ramp_duration"`
	// RestartUndrained lets vigil restart even when the drain failed. Off by
	// default: restarting an undrained host throws live traffic away.
	RestartUndrained bool `yaml:"restart_undrained"`
}

// HAProxy reaches the HAProxy runtime API.
type HAProxy struct {
	// Socket is "unix:///run/haproxy/admin.sock", a bare path, or
	// "tcp://127.0.0.1:9999". HAProxy needs "stats socket ... level admin".
	Socket string `yaml:"socket"`
	// Sockets, when set (instead of Socket), are the runtime APIs of
	// several HAProxy in front of this host (a pair behind keepalived or
	// DNS): drain, weight and ready go to every one, and a restart waits
	// until every one has confirmed the drain.
	Sockets []string `yaml:"sockets"`
	Backend string   `yaml:"backend"`
	Server  string   `yaml:"server"`
	// Timeout bounds each runtime API command.
	Timeout time.Duration `yaml:"timeout"`
}

// HTTPDrainer calls hooks for load balancers without a runtime API.
type HTTPDrainer struct {
	Drain   HTTPHook      `yaml:"drain"`
	Ready   HTTPHook      `yaml:"ready"`
	Timeout time.Duration `yaml:"timeout"`
}

// HTTPHook is one HTTP call. In Body, {{weight}} is replaced by the
// percentage during a ramp.
type HTTPHook struct {
	Method string `yaml:"method"`
	URL    string `yaml:"url"`
	Body   string `yaml:"body"`
}

// Restart says how to restart the engine and what limits restarts.
type Restart struct {
	// Kind: docker, systemd, command or none.
	Kind    string         `yaml:"kind"`
	Docker  DockerRestart  `yaml:"docker"`
	Systemd SystemdUnit    `yaml:"systemd"`
	Command CommandRestart `yaml:"command"`
	// Cooldown since the last restart before another is allowed.
	Cooldown time.Duration `yaml:"cooldown"`
	// Budget restarts per BudgetWindow at most.
	Budget       int           `yaml:"budget"`
	BudgetWindow time.Duration `yaml:"budget_window"`
	// ReadyTimeout: after a restart, /v1/models 200 and a completed probe
	// must come within this.
	ReadyTimeout time.Duration `yaml:"ready_timeout"`
}

// DockerRestart restarts a container through the Docker API.
type DockerRestart struct {
	// Host is the Docker API address, e.g. unix:///var/run/docker.sock.
	Host        string        `yaml:"host"`
	Container   string        `yaml:"container"`
	StopTimeout time.Duration `yaml:"stop_timeout"`
}

// SystemdUnit restarts a systemd unit with systemctl.
type SystemdUnit struct {
	Unit string `yaml:"unit"`
}

// CommandRestart runs a command (argv, no shell).
type CommandRestart struct {
	Argv    []string      `yaml:"argv"`
	Timeout time.Duration `yaml:"timeout"`
}

func defaultLoadBalancer() LoadBalancer {
	return LoadBalancer{
		Kind:                "none",
		HAProxy:             HAProxy{Socket: "unix:///run/haproxy/admin.sock", Timeout: 5 * time.Second},
		HTTP:                HTTPDrainer{Timeout: 10 * time.Second, Drain: HTTPHook{Method: "POST"}, Ready: HTTPHook{Method: "POST"}},
		HealthCheck:         defaultHealthCheck(),
		Agent:               defaultAgent(),
		DrainTimeoutHung:    15 * time.Second,
		DrainTimeoutPlanned: 120 * time.Second,
		RampWeights:         []int{10, 25, 50, 100},
		RampDuration:        2 * time.Minute,
	}
}

func defaultRestart() Restart {
	return Restart{
		Kind:         "none",
		Docker:       DockerRestart{Host: "unix:///var/run/docker.sock", StopTimeout: 30 * time.Second},
		Command:      CommandRestart{Timeout: 5 * time.Minute},
		Cooldown:     30 * time.Minute,
		Budget:       3,
		BudgetWindow: 6 * time.Hour,
		ReadyTimeout: 20 * time.Minute,
	}
}

func (l *LoadBalancer) validate(v *validator) {
	switch l.Kind {
	case "none":
	case "haproxy":
		_, socketSet := v.lines["load_balancer.haproxy.socket"]
		switch {
		case len(l.HAProxy.Sockets) > 0 && socketSet:
			v.errorf("load_balancer.haproxy.sockets", "set socket or sockets, not both")
		case len(l.HAProxy.Sockets) > 0:
			seen := map[string]bool{}
			for i, s := range l.HAProxy.Sockets {
				p := indexPath("load_balancer.haproxy.sockets", i)
				v.haproxySocket(p, s)
				if seen[s] {
					v.errorf(p, "%q is listed twice", s)
				}
				seen[s] = true
			}
		default:
			v.haproxySocket("load_balancer.haproxy.socket", l.HAProxy.Socket)
		}
		v.nonEmpty("load_balancer.haproxy.backend", l.HAProxy.Backend)
		v.nonEmpty("load_balancer.haproxy.server", l.HAProxy.Server)
		v.positive("load_balancer.haproxy.timeout", l.HAProxy.Timeout)
	case "http":
		v.httpURL("load_balancer.http.drain.url", l.HTTP.Drain.URL)
		v.httpURL("load_balancer.http.ready.url", l.HTTP.Ready.URL)
		v.positive("load_balancer.http.timeout", l.HTTP.Timeout)
	case "healthcheck":
		l.HealthCheck.validate(v)
	case "agent":
		l.Agent.validate(v)
	default:
		v.errorf("load_balancer.kind", "must be one of haproxy, http, healthcheck, agent, none; got %q", l.Kind)
	}
	v.positive("load_balancer.drain_timeout_hung", l.DrainTimeoutHung)
	v.positive("load_balancer.drain_timeout_planned", l.DrainTimeoutPlanned)
	if len(l.RampWeights) == 0 || l.RampWeights[len(l.RampWeights)-1] != 100 {
		v.errorf("load_balancer.ramp_weights", "must end at 100")
	}
	prev := 0
	for _, w := range l.RampWeights {
		if w <= prev || w > 100 {
			v.errorf("load_balancer.ramp_weights", "must rise strictly within 1..100, got %v", l.RampWeights)
			break
		}
		prev = w
	}
	nonNegative(v, "load_balancer.ramp_duration", l.RampDuration, "")
}

func (r *Restart) validate(v *validator, w Watchdog) {
	switch r.Kind {
	case "none":
	case "docker":
		v.nonEmpty("restart.docker.host", r.Docker.Host)
		v.nonEmpty("restart.docker.container", r.Docker.Container)
		v.positive("restart.docker.stop_timeout", r.Docker.StopTimeout)
	case "systemd":
		v.nonEmpty("restart.systemd.unit", r.Systemd.Unit)
	case "command":
		if len(r.Command.Argv) == 0 || r.Command.Argv[0] == "" {
			v.errorf("restart.command.argv", "is required when kind is command")
		}
		v.positive("restart.command.timeout", r.Command.Timeout)
	default:
		v.errorf("restart.kind", "must be one of docker, systemd, command, none; got %q", r.Kind)
	}
	nonNegative(v, "restart.cooldown", r.Cooldown, "")
	if r.Budget < 1 {
		v.errorf("restart.budget", "must be >= 1")
	}
	v.positive("restart.budget_window", r.BudgetWindow)
	v.positive("restart.ready_timeout", r.ReadyTimeout)
}

func (v *validator) haproxySocket(path, s string) {
	if v.nonEmpty(path, s) && !strings.HasPrefix(s, "unix://") && !strings.HasPrefix(s, "tcp://") && !strings.HasPrefix(s, "/") {
		v.errorf(path, "must be unix:///path, /path or tcp://host:port, got %q", s)
	}
}

// SocketList is every runtime API socket: Sockets, or Socket alone.
func (h HAProxy) SocketList() []string {
	if len(h.Sockets) > 0 {
		return h.Sockets
	}
	return []string{h.Socket}
}

func (v *validator) httpURL(path, s string) {
	if !v.nonEmpty(path, s) {
		return
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.errorf(path, "must be an http(s) URL, got %q", s)
	}
}
