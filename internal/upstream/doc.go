// Package upstream is vigil's HTTP/1.1 client for its one engine: a pool of
// keep-alive connections driven by the goroutine that makes the request,
// over net/http's own wire format (http.Request.Write, http.ReadResponse).
//
// Why not net/http's Transport: it runs a read goroutine and a write
// goroutine per connection and hands every request, answer and body end
// between them and the caller, each a wake-up of another goroutine. Here the
// caller writes the request and reads the answer itself: no hand-off at all.
//
// Whether that is still worth its own code was measured in one run
// (bench_test.go, BenchmarkInterleaved: the two transports alternate
// request by request against a loopback engine stand-in answering a
// completion, so both see the same load; 3 runs of 20,000 pairs on a
// shared, loaded 2-core machine; upstream / net/http):
//
//	                    p50                     p90                     mean
//	direct to engine    19.1-19.6 / 22.1-22.9µs  39-44 / 51-55µs         0.79-0.84
//	                    ratio 0.85-0.87          ratio 0.71-0.79
//	through a proxy     51.4-52.9 / 54.9-56.1µs  95-97 / 106-108µs       0.91-0.97
//	                    ratio 0.94               ratio 0.89-0.90
//
// and per request 57 allocations (4.7 KB) against 75 (6.3 KB) direct, 144
// against 163 through httputil.ReverseProxy (BenchmarkRoundTrip,
// BenchmarkProxied). The gain is real and consistent but small in absolute
// terms: 3-4 µs at the median, beside an LLM call of milliseconds to
// seconds. It is kept because the cost of keeping it is small too: the one
// correctness gap found (below) took a few lines to close. Should it ever
// need more than that (HTTP/2, TLS, proxies), it should give way to
// net/http's Transport, which the limiter already uses for an https engine.
//
// What it keeps from the Transport: keep-alive reuse (last used first),
// dial timeouts, cancellation (the request's context ending closes the
// connection, so the engine sees the client leave and aborts), an idle
// timeout below the engine's keep-alive, and net/http's replay rule. A
// reused connection that fails before a byte of the answer (the engine
// closed it while it sat idle) gets the request sent again, once, on a new
// connection, only when none of the request reached the connection, or
// when it is idempotent (GET, HEAD, OPTIONS, TRACE) or carries an
// Idempotency-Key or X-Idempotency-Key header, and its body can be
// replayed. It used to replay any POST: a completion the engine had read
// and begun could run twice, and an agent's tool call act twice. It
// speaks plain http:// only; the limiter keeps net/http's Transport for an
// https engine.
package upstream
