// Package recovery is the recovery's vocabulary: the steps of the
// sequence (Step, StepName), the guards that may refuse it (Guard,
// Refusal), and the Reporter told each step as it happens.
//
// Three packages speak it: the watchdog asks for a recovery, actions runs
// it and reports each step, alerts pages them. The words live apart from
// all three, with no dependency of their own, so alerts needs nothing
// from actions, and so nothing of the Docker client actions drives.
// The sequence itself is in actions (docs/design.md section 5).
package recovery
