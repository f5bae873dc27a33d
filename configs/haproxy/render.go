package haproxy

import (
	_ "embed"
	"errors"
	"fmt"
	"strings"
)

// PoolCfg is configs/haproxy/pool.cfg as shipped.
//
//go:embed pool.cfg
var PoolCfg string

// Backend is the pool backend's name in PoolCfg: what each vigil sets as
// load_balancer.haproxy.backend.
const Backend = "vigil_pool"

// Server is one pool member: its name (each vigil's
// load_balancer.haproxy.server) and its limiter's address.
type Server struct {
	Name string
	Addr string
}

// Options are the site-specific parts of PoolCfg.
type Options struct {
	// Socket is the runtime API socket's path.
	Socket string
	// Bind is the frontend's address, e.g. "127.0.0.1:8080".
	Bind    string
	Servers []Server
	// RoundRobin replaces the key hash by plain round-robin: the
	// comparison the pool benchmark makes, never for production.
	RoundRobin bool
	// CheckInterval, if set, replaces the health-check interval (tests
	// want a fast one).
	CheckInterval string
}

// Render returns PoolCfg with the socket path, the frontend's address and
// the server lines replaced; everything else is the shipped file. It fails
// if the file no longer has a line it expects to replace, so the shipped
// file and the tests cannot drift apart silently.
func Render(o Options) (string, error) {
	if o.Socket == "" || o.Bind == "" || len(o.Servers) == 0 {
		return "", errors.New("haproxy: socket, bind and at least one server are required")
	}
	var out []string
	seen := map[string]bool{}
	for line := range strings.Lines(PoolCfg) {
		line = strings.TrimRight(line, "\n")
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			out = append(out, line)
			continue
		}
		indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
		switch {
		case fields[0] == "stats" && len(fields) > 2 && fields[1] == "socket":
			fields[2] = o.Socket
			// A test user is not in the haproxy group; the mode stays.
			line = indent + strings.Join(fields, " ")
			seen["socket"] = true
		case fields[0] == "bind":
			line = indent + "bind " + o.Bind
			seen["bind"] = true
		case fields[0] == "balance":
			if o.RoundRobin {
				line = indent + "balance roundrobin"
			}
			seen["balance"] = true
		case fields[0] == "hash-type":
			if o.RoundRobin {
				continue
			}
		case fields[0] == "default-server":
			if o.CheckInterval != "" {
				for i := 0; i+1 < len(fields); i++ {
					if fields[i] == "inter" {
						fields[i+1] = o.CheckInterval
					}
				}
				line = indent + strings.Join(fields, " ")
			}
		case fields[0] == "server":
			if seen["servers"] {
				continue
			}
			seen["servers"] = true
			for _, s := range o.Servers {
				out = append(out, fmt.Sprintf("%sserver %s %s", indent, s.Name, s.Addr))
			}
			continue
		}
		out = append(out, line)
	}
	for _, k := range []string{"socket", "bind", "balance", "servers"} {
		if !seen[k] {
			return "", fmt.Errorf("haproxy: pool.cfg has no %s line to replace", k)
		}
	}
	return strings.Join(out, "\n") + "\n", nil
}
