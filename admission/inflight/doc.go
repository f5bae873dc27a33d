// Package inflight follows the limiter's calls in flight on the engine
// (Calls): how many, and the longest prompt among them, which the
// watchdog reads each cycle to size hang_after (auto) by; and, when the
// engine is declared lost, it cuts those that can move so that they do
// (package engineloss decides where).
package inflight
