package usage

import (
	"bytes"
	"encoding/json"
	"time"
)

// tailSize is how much of an answer's end is kept to read its usage from
// (OpenAI puts usage last, in the JSON object or the final SSE chunk).
const tailSize = 4096

var sseEvent = []byte("\ndata:")

// Meter watches an upstream answer go by without holding it: when its first
// byte came, how many SSE events it had, and its last few KB.
type Meter struct {
	// Sent is when the call went to the engine; SSE says the answer is an
	// event stream (its Content-Type), set before its first Chunk.
	Sent   time.Time
	SSE    bool
	first  time.Time
	events int
	edge   [5]byte // last bytes of the previous chunk, for events split across reads
	edgeN  int
	tail   []byte
}

// First is when the answer's first byte came (zero: none yet).
func (m *Meter) First() time.Time { return m.first }

// Chunk records p, read at now.
func (m *Meter) Chunk(p []byte, now time.Time) {
	if len(p) == 0 {
		return
	}
	if m.first.IsZero() {
		m.first = now
		// The stream starts as if after a newline, so a first "data:" counts.
		m.edge[0], m.edgeN = '\n', 1
	}
	if m.SSE {
		m.events += bytes.Count(p, sseEvent)
		// An event marker split across reads: look at the seam between the
		// stream's last bytes so far and this read (a marker is longer than
		// either side of the seam, so none is counted twice).
		var seam [10]byte
		n := copy(seam[:], m.edge[:m.edgeN])
		n += copy(seam[n:], p[:min(len(p), len(sseEvent)-1)])
		if bytes.Contains(seam[:n], sseEvent) {
			m.events++
		}
		// Keep the stream's last bytes, across reads shorter than the edge.
		n = copy(seam[:], m.edge[:m.edgeN])
		n += copy(seam[n:], p[max(0, len(p)-len(m.edge)):])
		m.edgeN = copy(m.edge[:], seam[max(0, n-len(m.edge)):n])
	}
	if len(p) >= tailSize {
		m.tail = append(m.tail[:0], p[len(p)-tailSize:]...)
		return
	}
	if over := len(m.tail) + len(p) - tailSize; over > 0 {
		m.tail = m.tail[:copy(m.tail, m.tail[over:])]
	}
	m.tail = append(m.tail, p...)
}

type reported struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// usage reads the last "usage" object of the answer, if any.
func (m *Meter) usage() (reported, bool) {
	i := bytes.LastIndex(m.tail, []byte(`"usage"`))
	if i < 0 {
		return reported{}, false
	}
	rest := bytes.TrimLeft(m.tail[i+len(`"usage"`):], " \t\r\n")
	rest, ok := bytes.CutPrefix(rest, []byte(":"))
	if !ok {
		return reported{}, false
	}
	var u *reported
	if err := json.NewDecoder(bytes.NewReader(rest)).Decode(&u); err != nil || u == nil {
		return reported{}, false
	}
	return *u, true
}

// Tokens returns the answer's output and total tokens: from usage when the
// engine reported it, else (streams) one token per event, else -1.
func (m *Meter) Tokens(promptEstimate int) (completion, total int) {
	if u, ok := m.usage(); ok {
		if u.TotalTokens == 0 {
			u.TotalTokens = u.PromptTokens + u.CompletionTokens
		}
		return u.CompletionTokens, u.TotalTokens
	}
	if m.SSE {
		n := max(0, m.events-1) // the [DONE] event
		return n, promptEstimate + n
	}
	return -1, -1
}
