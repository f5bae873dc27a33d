// Package calls is admission's memory of calls: which call an attempt
// belongs to, the one upstream execution its attempts share, the answers
// kept for retries that arrive after them, and the keys seen recently
// enough that an attempt carrying one is a retry.
//
// A client that times out and retries sends the same call again. Without
// this memory the engine would run it twice (or three, four times) while
// the first run is still going or just finished: retry amplification, the
// way a short overload becomes a lasting one. With it:
//
//   - a keyed call (one with an idempotency key, KeyOf) runs once. Its
//     Execution runs under its own context, outliving the attempt that
//     started it; a retry attaches as another listener (Memory.Lookup,
//     Memory.Start) and gets the whole answer, replayed from its first
//     byte and then live. A finished 2xx answer is kept for result_ttl
//     (an LRU bounded by result_store_bytes).
//   - a keyless call (Fingerprint) is never shared between two live
//     clients, but when its client leaves before the answer begins and
//     the client is an SDK that retries, its execution is kept as an
//     orphan that the identical retry adopts (Memory.Adopt).
//   - when an execution's last listener leaves (Memory.Leave) it is
//     cancelled after cancel_after (at least until an SDK's retry is due),
//     or at once when no retry could find it.
//
// The package knows nothing of HTTP beyond an answer's status, header and
// bytes: the admission package reads requests into keys, runs executions
// upstream, writes answers to clients, and tells the memory what happened
// (Begin, Append, Finish). Everything here is safe for concurrent use.
package calls
