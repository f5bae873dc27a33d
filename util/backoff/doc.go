// Package backoff is the one retry delay vigil uses, for pages and for
// recovery steps: exponential between a floor and a ceiling, with jitter,
// so that a fleet of vigils that failed together (a Slack outage, a
// Docker daemon restart) does not retry together.
package backoff
