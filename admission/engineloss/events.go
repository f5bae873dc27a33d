package engineloss

import "bytes"

// EventBuffer holds back the part of a stream after its last whole event,
// so listeners only ever get whole events and a stream cut mid-event can
// be continued exactly.
type EventBuffer struct{ pending []byte }

// maxPartialEvent bounds what is held back: a longer "event" is not the
// SSE this reads, and passes as it comes.
const maxPartialEvent = 1 << 20

// Add takes p and returns the whole events it completes.
func (b *EventBuffer) Add(p []byte) []byte {
	b.pending = append(b.pending, p...)
	i := bytes.LastIndex(b.pending, []byte("\n\n"))
	if i < 0 {
		if len(b.pending) > maxPartialEvent {
			return b.Rest()
		}
		return nil
	}
	whole := append([]byte(nil), b.pending[:i+2]...)
	b.pending = append(b.pending[:0], b.pending[i+2:]...)
	return whole
}

// Rest is what is held back, at the stream's end.
func (b *EventBuffer) Rest() []byte {
	r := b.pending
	b.pending = nil
	return r
}

// SpliceAll splices whole events (see Splice).
func SpliceAll(whole []byte, origID string, s *SpliceState) []byte {
	var out []byte
	for _, ev := range Events(whole) {
		out = append(out, Splice(ev, origID, s)...)
	}
	return out
}
