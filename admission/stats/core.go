package stats

import "github.com/vigil-dev/vigil/admission/core"

// SetCore sets what package core's snapshot tells: its counts of the
// queue, the cap in force and what the cap reads of the engine.
func (s *Stats) SetCore(cs core.Stats) {
	s.HeldWaits = cs.HeldWaits
	s.Admitted, s.Queued, s.QueueAbandoned = cs.Admitted, cs.Queued, cs.Abandoned
	s.QueueDepth, s.QueueHeld, s.OldestQueued = cs.QueueDepth, cs.QueueHeld, cs.OldestQueued
	s.InFlight, s.Cap, s.Automatic = cs.InFlight, cs.Cap, cs.Automatic
	s.FirstTokenLimit, s.AwaitingFirstToken = cs.FirstTokenLimit, cs.AwaitingFirstToken
	s.TTFTObjective = cs.TTFTObjective
	s.Service, s.ServiceBaseline, s.ServiceKneeApplies = cs.Service, cs.ServiceBaseline, cs.ServiceKneeApplies
	s.Saturated, s.Recovering, s.SlowStart = cs.Saturated, cs.Recovering, cs.SlowStart
	s.CompletionRate = cs.CompletionRate
	s.EngineWaiting, s.EngineRunning = cs.EngineWaiting, cs.EngineRunning
	s.LearnedClientTimeouts = cs.LearnedTimeouts
	s.PatientStreamRoutes = cs.PatientRoutes
}
