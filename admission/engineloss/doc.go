// Package engineloss holds what the admission limiter needs to lose an
// engine without losing its calls (docs/design.md, "The hang window" and
// "Moving calls off a lost engine"), as pure parts the limiter drives:
//
//   - Watch, the stall suspicion: fed each call sent to the engine, each
//     byte of its answers and each answer's end, it tells within a few of
//     the engine's own step times that the engine has stopped, and never
//     for a long prefill, a saturated batch or a slow engine. Every method
//     takes the time; none reads a clock. Suspicion runs it: under a lock,
//     checked every tick, told of progress by the engine's counters, and
//     asking the limiter (Host) to hold or release the engine, with the
//     Evidence of what raised it; Episodes groups the suspicions for the
//     log, one line an episode.
//   - Relay and Mover, a cut call's way on: what it needs to be sent
//     again, and where it goes next (a pool Peer, the restarted engine
//     once it is ready, or nowhere, with a Loss* code), holding it against
//     the queue's memory meanwhile (Holder).
//   - Continuation, Splice and EventBuffer, a stream's continuation: the
//     request that goes on with a stream cut by a lost engine where it
//     stopped, and the splicing of its events into the cut stream, so its
//     client sees one stream with no text twice or missing; the Loss*
//     codes say why a stream cannot be continued exactly.
//   - Outage, the engine's recovery as the limiter sees it, and Fate,
//     what became of the calls the hang cost (moved, held, continued,
//     lost, refused while held, queued), which the pages say.
//
// The limiter (package admission) keeps what acts on its own state and
// its HTTP: the sends of a call, again or elsewhere, the answer teed into
// its execution, and what it does while the engine is suspected or
// recovered.
package engineloss
