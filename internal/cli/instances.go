package cli

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"github.com/vigil-dev/vigil/configs"
)

// instance is one vigil@NAME of a node with several engines: the unit
// reads /etc/vigil/NAME.yaml and keeps its state in /var/lib/vigil/NAME.
type instance struct {
	name, path string
	cfg        *configs.Config
}

func newInstance(path string, cfg *configs.Config) instance {
	return instance{name: strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)), path: path, cfg: cfg}
}

func (in instance) String() string { return fmt.Sprintf("%s (%s)", in.name, in.path) }

// stateFile is where the instance keeps its state: the file's own
// watchdog.state_file, else what vigil@NAME's StateDirectory= gives.
func (in instance) stateFile() string {
	switch {
	case in.cfg.IsSet("watchdog.state_file"):
		return filepath.Clean(in.cfg.Watchdog.StateFile)
	case in.name == "vigil": // /etc/vigil/vigil.yaml is vigil.service's
		return "/var/lib/vigil/state.json"
	}
	return filepath.Join("/var/lib/vigil", in.name, "state.json")
}

type listener struct{ key, addr string }

// listeners are the addresses the instance binds.
func (in instance) listeners() []listener {
	c := in.cfg
	var out []listener
	if c.Admission.Enabled && c.Admission.Listen != "" {
		out = append(out, listener{"admission.listen", c.Admission.Listen})
	}
	if c.Status.Listen != "" {
		out = append(out, listener{"status.listen", c.Status.Listen})
	}
	switch c.LoadBalancer.Kind {
	case "healthcheck":
		out = append(out, listener{"load_balancer.healthcheck.listen", c.LoadBalancer.HealthCheck.Listen})
	case "agent":
		out = append(out, listener{"load_balancer.agent.listen", c.LoadBalancer.Agent.Listen})
	}
	return out
}

// engineUnit names what the instance restarts: the key, an identity to
// compare, and the words for a message; "" when it restarts nothing
// another instance could share.
func (in instance) engineUnit() (key, id, words string) {
	r := in.cfg.Restart
	switch r.Kind {
	case "docker":
		return "restart.docker.container", r.Docker.Host + "|" + r.Docker.Container,
			fmt.Sprintf("container %s on %s", r.Docker.Container, r.Docker.Host)
	case "systemd":
		unit := strings.TrimSuffix(r.Systemd.Unit, ".service")
		return "restart.systemd.unit", unit, "unit " + unit + ".service"
	}
	return "", "", ""
}

// instanceConflicts lists what two instances of one node share and must
// not: a listening port, a state file, the engine they restart.
func instanceConflicts(ins []instance) []string {
	var out []string
	for i := range ins {
		for j := i + 1; j < len(ins); j++ {
			a, b := ins[i], ins[j]
			for _, la := range a.listeners() {
				for _, lb := range b.listeners() {
					if sameSocket(la.addr, lb.addr) {
						out = append(out, fmt.Sprintf("%s %s and %s %s %s: the same port (each instance needs its own)",
							a, la.key, b, lb.key, la.addr))
					}
				}
			}
			if sa, sb := a.stateFile(), b.stateFile(); sa == sb {
				out = append(out, fmt.Sprintf("%s and %s share watchdog.state_file %s: their incidents and recovery journals would overwrite each other",
					a, b, sa))
			}
			if ka, ida, words := a.engineUnit(); ka != "" {
				if kb, idb, _ := b.engineUnit(); kb == ka && idb == ida {
					out = append(out, fmt.Sprintf("%s and %s share %s: both would restart %s (one engine, two watchdogs)",
						a, b, ka, words))
				}
			}
		}
	}
	return out
}

// sameSocket reports whether two listen addresses take the same port: the
// same port on the same host, or on any host where either binds every
// address.
func sameSocket(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || pa != pb {
		return false
	}
	wild := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || wild(ha) || wild(hb)
}
