package admission

// Load is the limiter's side of the engine's load, what the watchdog
// reads each cycle (it converts to watchdog.LimiterLoad, field for field):
// calls seen and answered 429/503 by the limiter itself since it started,
// calls in its queue, calls sent to the engine now and the estimated
// prompt tokens of the longest of them; and since it started, the reads
// of the engine's answers (EngineReads: any byte, of any call it sent the
// engine) and the calls the engine answered to their end (Answered).
type Load struct {
	Calls, Shed                     uint64
	Queued, InFlight, LongestPrompt int
	EngineReads, Answered           uint64
}

// Load reads the limiter's side of the load now.
func (l *Limiter) Load() Load {
	st := l.Stats()
	ld := Load{Calls: st.Calls, Queued: st.QueueDepth}
	for _, n := range st.Rejected {
		ld.Shed += n
	}
	ld.InFlight, ld.LongestPrompt = l.inflight.Snapshot()
	ld.EngineReads, ld.Answered = l.inflight.Counts()
	return ld
}
