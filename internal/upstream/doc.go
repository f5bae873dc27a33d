// Package upstream is vigil's HTTP/1.1 client for its one engine: a pool of
// keep-alive connections driven by the goroutine that makes the request,
// over net/http's own wire format (http.Request.Write, http.ReadResponse).
//
// Why not net/http's Transport: it runs a read goroutine and a write
// goroutine per connection and hands every request, answer and body end
// between them and the caller, each a wake-up of another goroutine. Here the
// caller writes the request and reads the answer itself: no hand-off at all.
// On a loopback upstream answering in ~100 µs (bench/overhead, both clients
// in the same run) that cut the latency vigil adds by 7-21% at the median
// and raised its request rate by 2-12%; the 99th percentile did not move
// consistently.
//
// What it keeps from the Transport: keep-alive reuse (last used first),
// dial timeouts, cancellation (the request's context ending closes the
// connection, so the engine sees the client leave and aborts), an idle
// timeout below the engine's keep-alive, and one retry on a new connection
// when a reused one fails before a byte of the answer (the engine closed it
// while idle). It speaks plain http:// only; the limiter keeps net/http's
// Transport for an https engine.
package upstream
