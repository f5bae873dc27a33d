// Package recoverer runs the recovery of a hung engine: the guarded,
// journaled sequence guards, drain, drain wait, restart, wait ready,
// restore, resolve (docs/design.md section 5). Its Recovery is the
// watchdog's Recoverer (watchdog.Recoverer); it speaks package recovery's
// vocabulary (steps, guards, refusals, the pool's turns) to those it
// reports to.
//
// # Where to look
//
// plan.go is the planner: a pure function from the journal and the facts
// of the moment to the next action, with no I/O, so every branch is a
// table test. executor.go carries the actions out, steps.go is each
// step's I/O (through a balancer.Drainer and a restarter.Restarter),
// guards.go and refusals.go say why a recovery may not run, poolturn.go
// takes the pool's turn before a drain, journal.go and report.go keep
// the journal that lets a restarted vigil resume a sequence where it
// stopped, without restarting the engine twice. dryrun.go says what a
// dry run would have done.
package recoverer
