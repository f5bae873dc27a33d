// Package engineloss holds what the admission limiter needs to lose an
// engine without losing its calls (docs/design.md, "The hang window" and
// "Moving calls off a lost engine"), as pure parts the limiter drives:
//
//   - Watch, the stall suspicion: fed each call sent to the engine, each
//     byte of its answers and each answer's end, it tells within a few of
//     the engine's own step times that the engine has stopped, and never
//     for a long prefill, a saturated batch or a slow engine. Every method
//     takes the time; none reads a clock.
//   - Continuation, Splice and EventBuffer, a stream's continuation: the
//     request that goes on with a stream cut by a lost engine where it
//     stopped, and the splicing of its events into the cut stream, so its
//     client sees one stream with no text twice or missing; the Loss*
//     codes say why a stream cannot be continued exactly.
//   - Outage, the engine's recovery as the limiter sees it, and Fate,
//     what became of the calls the hang cost (moved, held, continued,
//     lost, refused while held, queued), which the pages say.
//
// The limiter (package admission) keeps what acts on its own state: the
// relay that sends a call again elsewhere, the moves to a pool peer, and
// what it does while the engine is suspected or recovered.
package engineloss
