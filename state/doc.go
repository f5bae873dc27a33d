// Package state keeps vigil's persisted state in one JSON file, written
// atomically (temp file, fsync, rename), so that cooldowns, an incident and
// its recovery journal, and the page outbox survive vigil's own restart.
//
// The file is split into named sections; each component owns one section
// and saves it whenever it changes. A section that fails to decode is
// reported, never silently reset.
package state
