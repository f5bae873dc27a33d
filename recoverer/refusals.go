package recoverer

import (
	"context"
	"fmt"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/restarter"
	"github.com/vigil-dev/vigil/watchdog"
)

// outcome is what a refusal means for the clients: whether the host
// still takes traffic, and that in words for the page. The pages and the
// dedup key read serving, never the words: a reason may well say "out of
// rotation" about another member while this host serves.
type outcome struct {
	serving bool
	words   string
}

func serving(words string) outcome { return outcome{serving: true, words: words} }

// class is the outcome as the dedup key holds it ("out" or "serving",
// as journals written before the typed outcome hold it too).
func (o outcome) class() string {
	if o.serving {
		return "serving"
	}
	return "out"
}

// Outcomes of a refusal, as the pages say them.
func outOfRotation(c planConfig, ref *recovery.Refusal) outcome {
	if ref != nil && ref.Guard == recovery.GuardNoRestarter {
		return outcome{words: fmt.Sprintf("%s stays drained: the host is out of rotation until the engine serves again", c.Drainer)}
	}
	return outcome{words: fmt.Sprintf("%s stays drained: the host is out of rotation until the engine recovers by itself or a restart is allowed", c.Drainer)}
}

// stillServing says the host keeps its traffic; without a load balancer
// it names what the clients reach, as the incident's verdict found it.
func stillServing(c planConfig, v watchdog.State) outcome {
	if c.NoDrain {
		engine := "the engine"
		switch v {
		case watchdog.StateHung:
			engine = "the hung engine"
		case watchdog.StateDown:
			engine = "the engine while it is down"
		}
		return serving("no load balancer is configured (load_balancer.kind none), so clients keep reaching " + engine + ": the host still takes traffic")
	}
	return serving("the host still takes traffic")
}

// poolRefusal is the pool guard: another member out of rotation at the
// load balancer, or drained by its vigil (peers' /status).
func (r *Recovery) poolRefusal(ctx context.Context, lb balancer.State) *recovery.Refusal {
	if ref := poolLock(lb, r.drained(), false); ref != nil {
		return ref
	}
	if r.o.PeerDrained != nil && !r.drained() {
		if node, ok := r.o.PeerDrained(ctx); ok {
			return &recovery.Refusal{Guard: recovery.GuardPoolLock, Reason: fmt.Sprintf(
				"pool member %s is drained by its vigil; only one member of a pool is drained at a time", node)}
		}
	}
	return nil
}

// restartRefusal reads the engine (an unreadable one counts as never
// started) and says which time guard, if any, refuses its restart now.
func (r *Recovery) restartRefusal(ctx context.Context) (restarter.EngineStatus, *recovery.Refusal) {
	eng, err := r.o.Restarter.Status(ctx)
	if err != nil {
		eng = restarter.EngineStatus{}
	}
	return eng, r.timeRefusal(eng)
}
