package enginesim

import (
	"encoding/json"
	"hash"
	"hash/fnv"
	"strings"
)

// The generated text is deterministic and position-dependent, as greedy
// decoding of a real model is: token i follows from the whole context
// before it (the prompt as rendered, then tokens 0..i-1). So the same
// request always streams the same text, and a request that continues
// another (the prompt plus the text generated so far, or a chat ending in
// an assistant message with continue_final_message) streams exactly the
// rest: a test can check that a continued stream equals the uninterrupted
// one.

// vocabulary is what the simulated model says, one word a token.
var vocabulary = []string{
	" alpha", " bravo", " charlie", " delta", " echo", " foxtrot", " golf", " hotel",
	" india", " juliet", " kilo", " lima", " mike", " november", " oscar", " papa",
	" quebec", " romeo", " sierra", " tango", " uniform", " victor", " whiskey", " xray",
	" yankee", " zulu", " one", " two", " three", " four", " five", " six",
}

// textGen yields a request's tokens in order.
type textGen struct{ h hash.Hash64 }

// newTextGen starts from the rendered context.
func newTextGen(context string) *textGen {
	g := &textGen{h: fnv.New64a()}
	_, _ = g.h.Write([]byte(context))
	return g
}

// next is the text of the next token; it joins the context.
func (g *textGen) next() string {
	w := vocabulary[g.h.Sum64()%uint64(len(vocabulary))]
	_, _ = g.h.Write([]byte(w))
	return w
}

// take is the next n tokens' text.
func (g *textGen) take(n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(g.next())
	}
	return b.String()
}

// completionContext renders a /v1/completions prompt: a string as it is, a
// list of strings joined, token ids by their numbers.
func completionContext(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		return strings.Join(ss, "")
	}
	return string(raw)
}

// chatContext renders messages the way a chat template does: each message
// after its role's header; then the assistant's header to start a new
// message (add_generation_prompt, the default), or, with
// continue_final_message, the last (assistant) message left open so the
// model goes on writing it.
func chatContext(raw json.RawMessage, continueFinal bool) string {
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal(raw, &msgs)
	var b strings.Builder
	for i, m := range msgs {
		b.WriteString("<|" + m.Role + "|>\n")
		b.WriteString(contentText(m.Content))
		if continueFinal && i == len(msgs)-1 {
			return b.String()
		}
		b.WriteString("\n")
	}
	b.WriteString("<|assistant|>\n")
	return b.String()
}

// contentText is a message's text: a string, or its text parts joined.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}
