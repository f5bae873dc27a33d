package alerts

import (
	"fmt"
	"strings"

	"github.com/vigil-dev/vigil/configs"
)

// DescribeRecovery says in one or two sentences what vigil will do about
// a hung or down engine with this config, for the pages: "Will drain
// vllm/node1 at HAProxy, restart container vllm, restore traffic gradually
// (10% → 100% over 2m)." It names what vigil will not do as plainly:
// restart.kind none means a human restarts the engine.
func DescribeRecovery(cfg configs.Config) string {
	lb, rs := cfg.LoadBalancer, cfg.Restart
	var drain, restart, restore string
	switch lb.Kind {
	case "haproxy":
		drain = fmt.Sprintf("drain %s/%s at HAProxy", lb.HAProxy.Backend, lb.HAProxy.Server)
	case "http":
		drain = "drain at the load balancer (HTTP hook)"
	}
	switch rs.Kind {
	case "docker":
		restart = "restart container " + rs.Docker.Container
	case "systemd":
		restart = "restart unit " + rs.Systemd.Unit
	case "command":
		restart = "run the restart command"
	}
	if lb.Kind == "haproxy" || lb.Kind == "http" {
		restore = "restore traffic gradually"
		if n := len(lb.RampWeights); n > 0 && lb.RampDuration > 0 {
			restore += fmt.Sprintf(" (%d%% → %d%% over %s)", lb.RampWeights[0], lb.RampWeights[n-1], roughDuration(lb.RampDuration))
		}
	}
	var s string
	switch {
	case restart == "":
		s = "Will not restart: restart.kind is none, so a human must restart the engine."
	case drain == "":
		s = "Will " + restart + " (no load balancer drain configured: in-flight requests are lost)."
	default:
		s = "Will " + strings.Join([]string{drain, restart, restore}, ", ") + "."
	}
	if cfg.Watchdog.DryRun {
		s = "Dry run, nothing is changed: " + strings.Replace(s, "Will ", "would ", 1)
	}
	return s
}
