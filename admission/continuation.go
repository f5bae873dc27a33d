package admission

import (
	"bytes"
	"encoding/json"
	"strings"
)

// A stream cut by a lost engine goes on where it stopped: the same request
// again, with the text its client already has appended to the prompt
// (/v1/completions) or as an assistant message the engine continues
// (/v1/chat/completions, vLLM's continue_final_message), and max_tokens
// less what was sent. The new stream's events are spliced into the old
// one under its id, so the client sees one stream, no text twice, none
// missing, one [DONE]. Where that cannot be exact the stream ends with an
// OpenAI-shaped error event instead (see notContinuable).

// sofar is what a stream's clients were sent of the answer, read from the
// whole events published so far.
type sofar struct {
	id   string
	text string
	// tokens counts the events that carried text: vLLM sends one a token.
	tokens int
	// finished: a finish_reason came, only the stream's end is missing.
	finished bool
	// why it cannot be continued exactly (a loss* code); "" when it can.
	why string
}

// streamChunk is the part of an OpenAI stream event a continuation reads.
type streamChunk struct {
	ID      string          `json:"id"`
	Error   json.RawMessage `json:"error"`
	Choices []struct {
		Index int     `json:"index"`
		Text  *string `json:"text"`
		Delta *struct {
			Role             string          `json:"role"`
			Content          *string         `json:"content"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
			ReasoningContent *string         `json:"reasoning_content"`
			Reasoning        *string         `json:"reasoning"`
		} `json:"delta"`
		Logprobs     json.RawMessage `json:"logprobs"`
		FinishReason *string         `json:"finish_reason"`
	} `json:"choices"`
}

// eventData is the data of one SSE event (its data: lines joined), and
// whether it had any.
func eventData(ev []byte) ([]byte, bool) {
	var out []byte
	found := false
	for _, line := range bytes.Split(ev, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		d, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		d = bytes.TrimPrefix(d, []byte(" "))
		if found {
			out = append(out, '\n')
		}
		out = append(out, d...)
		found = true
	}
	return out, found
}

// events splits whole SSE events (each ends with a blank line).
func events(buf []byte) [][]byte {
	var out [][]byte
	for len(buf) > 0 {
		i := bytes.Index(buf, []byte("\n\n"))
		if i < 0 {
			out = append(out, buf)
			break
		}
		out = append(out, buf[:i+2])
		buf = buf[i+2:]
	}
	return out
}

// readSofar reads what a stream sent from its whole events.
func readSofar(buf []byte) sofar {
	var s sofar
	var text strings.Builder
	for _, ev := range events(buf) {
		data, ok := eventData(ev)
		if !ok || bytes.Equal(data, []byte("[DONE]")) {
			continue
		}
		var c streamChunk
		if err := json.Unmarshal(data, &c); err != nil {
			s.why = lossNotJSON
			continue
		}
		if len(c.Error) > 0 && !bytes.Equal(c.Error, []byte("null")) {
			s.why = lossEngineError
		}
		if s.id == "" {
			s.id = c.ID
		}
		for _, ch := range c.Choices {
			if ch.Index != 0 {
				s.why = lossSeveral
				continue
			}
			if len(ch.Logprobs) > 0 && !bytes.Equal(ch.Logprobs, []byte("null")) {
				s.why = lossLogprobs
			}
			piece := ""
			switch {
			case ch.Text != nil:
				piece = *ch.Text
			case ch.Delta != nil:
				d := ch.Delta
				if d.Content != nil {
					piece = *d.Content
				}
				if len(d.ToolCalls) > 0 && !bytes.Equal(d.ToolCalls, []byte("null")) {
					s.why = lossToolCall
				}
				if (d.ReasoningContent != nil && *d.ReasoningContent != "") || (d.Reasoning != nil && *d.Reasoning != "") {
					s.why = lossReasoning
				}
			}
			if piece != "" {
				text.WriteString(piece)
				s.tokens++
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				s.finished = true
			}
		}
	}
	s.text = text.String()
	return s
}

// Why a call cut by a lost engine could not be moved: the label of
// vigil_admission_engine_lost_calls_total{fate="lost"} and the code of
// the error its client gets; lossText says it in words.
const (
	lossSeveral     = "n_gt_1"
	lossLogprobs    = "logprobs"
	lossEcho        = "echo"
	lossToolCall    = "tool_call"
	lossReasoning   = "reasoning"
	lossTokenPrompt = "token_prompt"
	lossPath        = "path"
	lossNotJSON     = "not_json"
	lossEngineError = "engine_error"
	lossTooLong     = "too_long"
	lossUnaryBegun  = "answer_begun"
	lossMoves       = "max_moves"
	lossRefused     = "continuation_refused"
)

// lossReasons lists every loss code, for the metric's labels.
var lossReasons = []string{lossSeveral, lossLogprobs, lossEcho, lossToolCall, lossReasoning, lossTokenPrompt, lossPath,
	lossNotJSON, lossEngineError, lossTooLong, lossUnaryBegun, lossMoves, lossRefused}

var lossText = map[string]string{
	lossSeveral:     "n > 1: several answers in one stream",
	lossLogprobs:    "the stream carries logprobs",
	lossEcho:        "echo: the prompt is part of the answer",
	lossToolCall:    "a tool call was half written",
	lossReasoning:   "reasoning text the engine cannot be handed back",
	lossTokenPrompt: "a prompt of token ids or several prompts",
	lossPath:        "vigil continues streams of /v1/completions and /v1/chat/completions only",
	lossNotJSON:     "the request or the stream is not the JSON vigil reads",
	lossEngineError: "the engine had ended the stream with an error",
	lossTooLong:     "the answer was too long to keep for a continuation",
	lossUnaryBegun:  "the answer had begun",
	lossMoves:       "it was moved the most times allowed (admission.max_moves)",
	lossRefused:     "the engine refused to continue it",
}

// Paths whose streams vigil knows how to continue.
const (
	pathCompletions = "/v1/completions"
	pathChat        = "/v1/chat/completions"
)

// defaultCompletionMaxTokens is vLLM's max_tokens for /v1/completions
// when the request names none.
const defaultCompletionMaxTokens = 16

// continuation is the request that goes on with a stream after s: body is
// the original request's. It says why not (a loss* code) when the
// continuation could not be exact.
func continuation(path string, body []byte, s sofar) ([]byte, string) {
	if s.why != "" {
		return nil, s.why
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, lossNotJSON
	}
	if why := requestNotContinuable(req); why != "" {
		return nil, why
	}
	if s.text == "" {
		return body, "" // nothing sent yet: the request as it was
	}
	switch path {
	case pathCompletions:
		var prompt string
		if json.Unmarshal(req["prompt"], &prompt) != nil {
			var one []string
			if json.Unmarshal(req["prompt"], &one) != nil || len(one) != 1 {
				return nil, lossTokenPrompt
			}
			prompt = one[0]
		}
		req["prompt"] = mustJSON(prompt + s.text)
		if !lessTokens(req, "max_tokens", s.tokens) {
			req["max_tokens"] = mustJSON(max(1, defaultCompletionMaxTokens-s.tokens))
		}
	case pathChat:
		var msgs []json.RawMessage
		if json.Unmarshal(req["messages"], &msgs) != nil || len(msgs) == 0 {
			return nil, lossNotJSON
		}
		msgs = append(msgs, mustJSON(map[string]string{"role": "assistant", "content": s.text}))
		req["messages"] = mustJSON(msgs)
		req["continue_final_message"] = json.RawMessage("true")
		req["add_generation_prompt"] = json.RawMessage("false")
		lessTokens(req, "max_tokens", s.tokens)
		lessTokens(req, "max_completion_tokens", s.tokens)
	default:
		return nil, lossPath
	}
	return mustJSON(req), ""
}

// requestNotContinuable says why a request's stream could not be
// continued exactly, whatever was sent of it.
func requestNotContinuable(req map[string]json.RawMessage) string {
	num := func(k string) float64 {
		var f float64
		_ = json.Unmarshal(req[k], &f)
		return f
	}
	truthy := func(k string) bool {
		v := bytes.TrimSpace(req[k])
		return len(v) > 0 && !bytes.Equal(v, []byte("null")) && !bytes.Equal(v, []byte("false")) &&
			!bytes.Equal(v, []byte("0"))
	}
	switch {
	case num("n") > 1 || num("best_of") > 1:
		return lossSeveral
	case truthy("logprobs") || truthy("top_logprobs"):
		return lossLogprobs
	case truthy("echo"):
		return lossEcho
	}
	return ""
}

// lessTokens lowers the request's limit k by sent tokens (at least 1
// left) and reports whether the request had one.
func lessTokens(req map[string]json.RawMessage, k string, sent int) bool {
	var n float64
	if v, ok := req[k]; !ok || json.Unmarshal(v, &n) != nil || n <= 0 {
		return false
	}
	req[k] = mustJSON(max(1, int(n)-sent))
	return true
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only values built here, which always encode
	}
	return b
}

// splice turns the continuation's events into the cut stream's: its
// first events announcing the role again are dropped, and every event
// carries the original stream's id. It returns nil for a dropped event.
func splice(ev []byte, origID string, s *spliceState) []byte {
	data, ok := eventData(ev)
	if !ok || bytes.Equal(data, []byte("[DONE]")) {
		return ev
	}
	var c streamChunk
	if json.Unmarshal(data, &c) != nil {
		return ev
	}
	if !s.content && roleOnly(&c) {
		return nil
	}
	s.content = true
	if s.sent > 0 && bytes.Contains(data, []byte(`"usage"`)) {
		ev = withUsageSoFar(ev, data, s.sent)
	}
	if origID == "" || c.ID == "" || c.ID == origID {
		return ev
	}
	return bytes.Replace(ev, mustJSON(c.ID), mustJSON(origID), 1)
}

// spliceState is what splice remembers across a continuation's events.
type spliceState struct {
	content bool // an event with more than a role went through
	// sent is the tokens the cut stream had sent: the continuation's
	// usage counts them as prompt, the client as completion.
	sent int
}

// withUsageSoFar rewrites a continuation event's usage as the whole
// stream's: the tokens sent before the cut move from the prompt back to
// the completion. An event it cannot read passes as it is.
func withUsageSoFar(ev, data []byte, sent int) []byte {
	var obj map[string]json.RawMessage
	var u map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil || json.Unmarshal(obj["usage"], &u) != nil || u == nil {
		return ev
	}
	var prompt, completion int
	if json.Unmarshal(u["prompt_tokens"], &prompt) != nil || json.Unmarshal(u["completion_tokens"], &completion) != nil {
		return ev
	}
	prompt, completion = max(0, prompt-sent), completion+sent
	u["prompt_tokens"], u["completion_tokens"] = mustJSON(prompt), mustJSON(completion)
	if _, ok := u["total_tokens"]; ok {
		u["total_tokens"] = mustJSON(prompt + completion)
	}
	obj["usage"] = mustJSON(u)
	return append(append([]byte("data: "), mustJSON(obj)...), "\n\n"...)
}

// roleOnly: a chat event that only announces the assistant's role.
func roleOnly(c *streamChunk) bool {
	if len(c.Choices) == 0 {
		return false
	}
	for _, ch := range c.Choices {
		if ch.Delta == nil || ch.Delta.Role == "" || (ch.Delta.Content != nil && *ch.Delta.Content != "") ||
			len(ch.Delta.ToolCalls) > 0 || (ch.FinishReason != nil && *ch.FinishReason != "") {
			return false
		}
	}
	return true
}

// errorEvent ends a stream that cannot go on, in the shape the OpenAI
// SDKs raise as an APIError (a data event with an "error" object).
func errorEvent(code, message string) []byte {
	b := mustJSON(errorBody{Error: errorDetail{Message: message, Type: "server_error", Code: code}})
	return append(append([]byte("data: "), b...), "\n\n"...)
}
