// Package usage reads what an engine's answer used as it passes through
// the limiter, without holding it (Meter): when its first byte came, how
// many SSE events it had, and the OpenAI usage object at its end, from
// which the limiter learns the call's tokens (one token an event when the
// engine reports none). It knows nothing of HTTP or of the limiter.
package usage
