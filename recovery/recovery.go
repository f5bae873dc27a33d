package recovery

import (
	"sort"
	"time"
)

// StepName names one step of the recovery sequence (docs/design.md section 5).
type StepName string

// The recovery steps, in the order they run.
const (
	StepGuards         StepName = "guards"          // checking the guards (journaled; only a refusal is reported)
	StepGuardRefused   StepName = "guard_refused"   // a guard said no; Until says when it lifts
	StepHeld           StepName = "held"            // drained while a guard refuses the restart, until the engine recovers or the guard lifts
	StepDrain          StepName = "drain"           // set the server to DRAIN at the LB
	StepDrainWait      StepName = "drain_wait"      // wait for sessions to leave (or the timeout)
	StepRestarting     StepName = "restarting"      // about to restart: the engine is expected DOWN until it is back (reported, not journaled)
	StepRestart        StepName = "restart"         // restart the engine
	StepRestartSkipped StepName = "restart_skipped" // the engine already restarted itself
	StepWaitReady      StepName = "wait_ready"      // /v1/models 200 and a probe completes
	StepRestore        StepName = "restore"         // READY with the weight ramp, limiter slow start
	StepResolved       StepName = "resolved"        // recovery finished
	StepFailed         StepName = "failed"          // a step failed; Err says why, Detail what vigil does next
	// StepTurn reports the pool's turn (pool.coordination: etcd): waited
	// for, taken, taken back from the journal, or given back.
	StepTurn StepName = "pool_turn"
)

// Step is one journaled recovery step with its result, reported to the
// pager as a thread reply.
type Step struct {
	Incident string    `json:"incident"`
	Name     StepName  `json:"name"`
	At       time.Time `json:"at"`
	OK       bool      `json:"ok"`
	// Detail is one operator-readable line, e.g. "haproxy vllm/node1 DRAIN,
	// 3 sessions left after 15s".
	Detail string `json:"detail,omitempty"`
	Err    string `json:"error,omitempty"`
	// Guard names the guard that refused (StepGuardRefused only).
	Guard Guard `json:"guard,omitempty"`
	// Until is when a refused guard lifts (zero when it lifts on someone
	// else's action, e.g. another server being restored).
	Until time.Time `json:"until,omitzero"`
	// Serving says, for StepGuardRefused, that the refusal leaves the host
	// taking traffic (no load balancer, or vigil could not drain it);
	// false when the host is held, or in a dry run would be held, out of
	// rotation. The pager words its pages from this, never from Detail.
	Serving bool `json:"serving,omitempty"`
	// Dropped is how many in-flight requests a restart aborted.
	Dropped int `json:"dropped,omitempty"`
	// Calls is what became of the calls the admission limiter cut from
	// the engine (StepResolved; nil without a limiter or when none was
	// cut).
	Calls  *CallFate `json:"calls,omitempty"`
	DryRun bool      `json:"dry_run,omitempty"`
}

// CallFate is what became of the calls in flight through vigil's limiter
// when the engine was lost: moved to pool peers, held for the restarted
// engine, streams continued, lost by reason. The limiter counts it as
// engineloss.Fate, which is this type.
type CallFate struct {
	MovedTo   map[string]int `json:"moved_to,omitempty"`
	Held      int            `json:"held"`
	Continued int            `json:"continued"`
	Lost      map[string]int `json:"lost,omitempty"`
	// Refused counts calls vigil answered 503 while the engine was held
	// (suspected stalled, recovered, ramping), by reason: lost too.
	Refused map[string]int `json:"refused,omitempty"`
	// Queued counts calls that waited in vigil's queue while the engine
	// was held and were then served; WaitP50 and WaitMax their waits.
	Queued  int           `json:"queued,omitempty"`
	WaitP50 time.Duration `json:"wait_p50_ns,omitempty"`
	WaitMax time.Duration `json:"wait_max_ns,omitempty"`
	// HeldWaitMax is the longest a held call waited for the restarted
	// engine, from its cut to its send (0 while none was released).
	HeldWaitMax time.Duration `json:"held_wait_max_ns,omitempty"`
	// The hang window's moments, on the limiter's clock: Opened when it
	// began (the first suspicion, or the verdict when none came first),
	// Verdict when the recovery began (zero: a suspicion only), and
	// LastSent the last call the limiter sent the engine before the
	// verdict: how long vigil kept feeding an engine that had stopped;
	// Ended when the restarted engine took calls again.
	Opened   time.Time `json:"opened,omitzero"`
	Verdict  time.Time `json:"verdict,omitzero"`
	LastSent time.Time `json:"last_sent,omitzero"`
	Ended    time.Time `json:"ended,omitzero"`
}

// Moved is the calls moved to peers.
func (f CallFate) Moved() int {
	n := 0
	for _, c := range f.MovedTo {
		n += c
	}
	return n
}

// LostTotal is the calls lost: cut and ended with an error, or refused
// while the engine was held.
func (f CallFate) LostTotal() int {
	n := 0
	for _, c := range f.Lost {
		n += c
	}
	for _, c := range f.Refused {
		n += c
	}
	return n
}

// Peers names the peers calls moved to, most first.
func (f CallFate) Peers() []string {
	names := make([]string, 0, len(f.MovedTo))
	for n := range f.MovedTo {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if f.MovedTo[names[i]] != f.MovedTo[names[j]] {
			return f.MovedTo[names[i]] > f.MovedTo[names[j]]
		}
		return names[i] < names[j]
	})
	return names
}

// Any reports whether the hang touched any call.
func (f CallFate) Any() bool {
	return len(f.MovedTo) > 0 || f.Held > 0 || f.Continued > 0 || len(f.Lost) > 0 || len(f.Refused) > 0 || f.Queued > 0
}

// Reporter is told every step as it happens (the pager implements it).
// It must not block.
type Reporter interface {
	RecoveryStep(s Step)
}

// Guard names one of the checks that must pass before vigil drains and
// restarts (docs/design.md section 5, step 1).
type Guard string

// The guards, in the order they are checked.
const (
	// GuardNoRestarter: restart.kind is none, so vigil cannot restart the
	// engine; nothing lifts it but the engine recovering (or a person).
	GuardNoRestarter Guard = "no_restarter"
	// GuardStateUnwritable: the state file cannot be written, so no step
	// of a recovery can be journaled; vigil drains and restarts nothing
	// until it can (a drain it could not remember would outlive it).
	GuardStateUnwritable Guard = "state_unwritable"
	// GuardStartupGrace: the engine (re)started recently and may still be
	// loading.
	GuardStartupGrace Guard = "startup_grace"
	// GuardCooldown: vigil restarted the engine recently.
	GuardCooldown Guard = "cooldown"
	// GuardBudget: vigil has used its restarts for the window.
	GuardBudget Guard = "budget"
	// GuardPoolLock: another member of the pool is drained (the load
	// balancer's state is the pool's lock), or this host was drained by
	// someone else.
	GuardPoolLock Guard = "pool_lock"
	// GuardCoordinator: the pool's turn could not be taken (etcd
	// unreachable, or others held every place for too long).
	GuardCoordinator Guard = "pool_coordinator"
	// GuardCapacityFloor: fewer than min_serving other members would keep
	// serving.
	GuardCapacityFloor Guard = "capacity_floor"
)

// Refusal is a guard's no: which guard, why in words, and when it lifts.
type Refusal struct {
	Guard  Guard  `json:"guard"`
	Reason string `json:"reason"`
	// Until is when the guard lifts; zero when that depends on someone
	// else (another server being restored).
	Until time.Time `json:"until,omitzero"`
}
