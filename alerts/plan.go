package alerts

import (
	"fmt"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/util/humanize"
)

// DescribeRecovery says in one or two sentences what vigil will do about
// a hung or down engine with this config, for the pages: "Will drain
// vllm/node1 at HAProxy, restart container vllm, restore traffic gradually
// (10% → 100% over 2m)." It names what vigil will not do as plainly:
// restart.kind none means a human restarts the engine, and without a load
// balancer (load_balancer.kind none) it says nothing of draining, only
// that requests in flight are lost or that the host keeps taking traffic.
func DescribeRecovery(cfg configs.Config) string {
	lb, rs := cfg.LoadBalancer, cfg.Restart
	drain := drainTarget(lb)
	var restart, restore string
	switch rs.Kind {
	case "docker", "systemd":
		restart = "restart " + restartTarget(rs)
	case "command":
		restart = "run the restart command"
	}
	if drain != "" {
		restore = "restore traffic gradually"
		if n := len(lb.RampWeights); n > 0 && lb.RampDuration > 0 {
			restore += fmt.Sprintf(" (%d%% → %d%% over %s)", lb.RampWeights[0], lb.RampWeights[n-1], humanize.Rough(lb.RampDuration))
		}
	}
	var s string
	switch {
	case restart == "" && cfg.Watchdog.DryRun:
		return "Dry run, nothing is changed: " + manualIntent(refusalNote{Dry: true}, drain, restore)
	case restart == "":
		return manualIntent(refusalNote{}, drain, restore)
	case drain == "" && cfg.Admission.Enabled:
		// The limiter cuts the calls in flight on the engine and sends
		// them again (to a peer, or to the restarted engine): only what
		// went around it is lost.
		s = "Will " + restart + ". No load balancer is configured (load_balancer.kind none): calls through vigil's limiter are held for the restarted engine or moved to a peer; calls sent straight to the engine are lost."
	case drain == "":
		s = "Will " + restart + ". No load balancer is configured (load_balancer.kind none), so requests in flight are lost."
	default:
		s = "Will " + strings.Join([]string{"drain " + drain, restart, restore}, ", ") + "."
	}
	if cfg.Watchdog.DryRun {
		s = "Dry run, nothing is changed: " + strings.Replace(s, "Will ", "would ", 1)
	}
	return s
}

// drainTarget names what a drain takes out of rotation ("vllm/node1 at
// HAProxy"), or "" when there is no load balancer.
func drainTarget(lb configs.LoadBalancer) string {
	switch lb.Kind {
	case "haproxy":
		return fmt.Sprintf("%s/%s at HAProxy", lb.HAProxy.Backend, lb.HAProxy.Server)
	case "http":
		return "the host at the load balancer (HTTP hook)"
	case "agent":
		return "the host at HAProxy (agent-check on " + lb.Agent.Listen + ")"
	case "healthcheck":
		return "the host at the load balancer (health check on " + lb.HealthCheck.Listen + lb.HealthCheck.Path + ")"
	}
	return ""
}

// guardWords says why a guard refuses a restart, for the intent of a page.
var guardWords = map[recovery.Guard]string{
	recovery.GuardStartupGrace:    "the engine started recently and is within its startup grace",
	recovery.GuardCooldown:        "vigil restarted the engine recently (restart.cooldown)",
	recovery.GuardBudget:          "the restart budget is spent (restart.budget)",
	recovery.GuardPoolLock:        "another member of the pool is out of rotation",
	recovery.GuardNoRestarter:     "no restarter is configured (restart.kind none)",
	recovery.GuardStateUnwritable: "the state file cannot be written (watchdog.state_file), so vigil can journal no step of a recovery",
}

// refusedIntent is what vigil will do about a hung or down engine while a
// guard refuses the restart: the guard, when it lifts, and whether the
// host is held out of rotation or still takes traffic. drain is the drain
// target ("" without a load balancer); serving says the drain was not
// possible (pool guard, load balancer unreadable).
func refusedIntent(g refusalNote, drain string, now time.Time) string {
	if g.Guard == recovery.GuardNoRestarter {
		return manualIntent(g, drain, "")
	}
	why, ok := guardWords[g.Guard]
	if !ok {
		why = "a recovery guard refuses it"
	}
	s := "Not restarting: " + why
	if !g.Until.IsZero() && g.Until.After(now) {
		s += fmt.Sprintf(" until %s (in %s)", humanize.ClockUTC(g.Until), humanize.Rough(g.Until.Sub(now)))
	}
	s += "."
	switch {
	case drain == "":
		s += " No load balancer is configured, so the host still takes traffic."
	case g.Serving:
		s += " It cannot be taken out of rotation either: the host still takes traffic."
	case g.Dry:
		s += " Dry run: would hold " + drain + " out of rotation."
	default:
		s += " Holding " + drain + " out of rotation until the engine recovers or a restart is allowed."
	}
	return s
}

// manualIntent is what happens about a hung or down engine when nothing
// is configured to restart it: nothing will be attempted, so the page
// says what the operator must do, and no word of a restart to come.
// restore says how traffic comes back ("": not known here).
func manualIntent(g refusalNote, drain, restore string) string {
	s := "No restarter is configured (restart.kind none): vigil leaves the engine as it is."
	switch {
	case drain == "":
		s += " No load balancer is configured either, so the host still takes traffic."
	case g.Serving:
		s += " It cannot be taken out of rotation: the host still takes traffic."
	case g.Dry:
		s += " Dry run: would hold " + drain + " out of rotation."
	case restore != "":
		s += " Will drain " + drain + " and keep it out of rotation, then " + restore + " once the engine serves again."
	default:
		s += " Holding " + drain + " out of rotation; traffic comes back once the engine serves again."
	}
	return s + " To recover, restart the engine by hand (or set restart.kind); this incident resolves once it serves again."
}

// RecoveryPlan is what recovery would do with this config, for the status
// page: the kinds, their targets, and DescribeRecovery's sentence.
type RecoveryPlan struct {
	Restart, RestartTarget    string
	LoadBalancer, DrainTarget string
	Summary                   string
}

// PlanFor describes cfg's recovery for the status page.
func PlanFor(cfg configs.Config) RecoveryPlan {
	rs := cfg.Restart
	return RecoveryPlan{
		Restart: rs.Kind, RestartTarget: restartTarget(rs),
		LoadBalancer: cfg.LoadBalancer.Kind, DrainTarget: drainTarget(cfg.LoadBalancer),
		Summary: DescribeRecovery(cfg),
	}
}

// PlanNow is PlanFor with the guard that refuses a restart now (ref, from
// the recovery's Outlook; nil when none would): its Summary then says what
// vigil will really do, as an incident's first page would, not what the
// configuration alone promises.
func PlanNow(cfg configs.Config, ref *recovery.Refusal, now time.Time) RecoveryPlan {
	p := PlanFor(cfg)
	if ref == nil {
		return p
	}
	drain := drainTarget(cfg.LoadBalancer)
	serving := drain == "" || ref.Guard == recovery.GuardStateUnwritable
	p.Summary = refusedIntent(refusalNote{Guard: ref.Guard, Until: ref.Until, Dry: cfg.Watchdog.DryRun, Serving: serving}, drain, now)
	return p
}

// restartTarget names what restart.kind restarts ("container vllm"), or
// "" when nothing is.
func restartTarget(rs configs.Restart) string {
	switch rs.Kind {
	case "docker":
		return "container " + rs.Docker.Container
	case "systemd":
		return "unit " + rs.Systemd.Unit
	case "command":
		return "restart.command"
	}
	return ""
}

// DisplayURL is the engine URL as pages and the status page show it,
// without userinfo or query.
func DisplayURL(raw string) string { return displayURL(raw) }
