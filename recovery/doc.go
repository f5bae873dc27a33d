// Package recovery is the recovery's vocabulary: the steps of the
// sequence (Step, StepName), the guards that may refuse it (Guard,
// Refusal), the Reporter told each step as it happens, and the pool's
// turns it takes before it drains (Turn, TurnHold, Coordinator).
//
// Four packages speak it: the watchdog asks for a recovery, the
// recoverer runs it and reports each step, alerts pages them, and
// pool/coord grants the turns over etcd. The words live apart from them
// all, with no dependency of their own, so alerts needs nothing of the
// recoverer (nor of the Docker client its restarter drives) and the
// recoverer nothing of the etcd client. The recovery itself is package
// recoverer (docs/design.md section 5), in a folder of its own: it
// imports the watchdog, which imports these words.
package recovery
