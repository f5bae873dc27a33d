// Package watchdog tells a saturated engine from a hung one by counter
// progress, and asks for recovery only when it is really broken.
//
// Classify is a pure function of the recent samples, the guard state and
// the time: the same history always gives the same verdict, so its rules
// (docs/design.md section 3) are tested by tables without a clock or a network.
// Watchdog is the cycle loop around it: sample every interval, classify,
// keep the incident state machine, tell the pager and the limiter, ask the
// recoverer, and persist what it needs to survive vigil's own restart.
// Diagnose is the one-shot form behind `vigil diagnose`. The ports the
// loop drives (Pager, Recoverer) live here; the recovery's steps and
// guards are package recovery's.
//
// The rule the package exists for: never restart a saturated engine,
// always catch a hung one. Saturated means counters still advance under a
// deep queue; hung means no progress signal (token counters or a step
// heartbeat) moved for hang_after while work was pending. An unreadable
// scrape is unknown, never frozen, and a counter that goes down means the
// engine restarted: re-baseline, never a verdict.
package watchdog
