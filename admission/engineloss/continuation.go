package engineloss

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

// SoFar is what a stream's clients were sent of the answer, read from the
// whole events published so far.
type SoFar struct {
	ID   string
	Text string
	// Tokens counts the events that carried text: vLLM sends one a token.
	Tokens int
	// Finished: a finish_reason came, only the stream's end is missing.
	Finished bool
	// Why it cannot be continued exactly (a Loss* code); "" when it can.
	Why string
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

// Events splits whole SSE events (each ends with a blank line).
func Events(buf []byte) [][]byte {
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

// ReadSoFar reads what a stream sent from its whole events.
func ReadSoFar(buf []byte) SoFar {
	var s SoFar
	var text strings.Builder
	for _, ev := range Events(buf) {
		data, ok := eventData(ev)
		if !ok || bytes.Equal(data, []byte("[DONE]")) {
			continue
		}
		var c streamChunk
		if err := json.Unmarshal(data, &c); err != nil {
			s.Why = LossNotJSON
			continue
		}
		if len(c.Error) > 0 && !bytes.Equal(c.Error, []byte("null")) {
			s.Why = LossEngineError
		}
		if s.ID == "" {
			s.ID = c.ID
		}
		for _, ch := range c.Choices {
			if ch.Index != 0 {
				s.Why = LossSeveral
				continue
			}
			if len(ch.Logprobs) > 0 && !bytes.Equal(ch.Logprobs, []byte("null")) {
				s.Why = LossLogprobs
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
					s.Why = LossToolCall
				}
				if (d.ReasoningContent != nil && *d.ReasoningContent != "") || (d.Reasoning != nil && *d.Reasoning != "") {
					s.Why = LossReasoning
				}
			}
			if piece != "" {
				text.WriteString(piece)
				s.Tokens++
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				s.Finished = true
			}
		}
	}
	s.Text = text.String()
	return s
}

// Why a call cut by a lost engine could not be moved: the label of
// vigil_admission_engine_lost_calls_total{fate="lost"} and the code of
// the error its client gets; LossText says it in words.
const (
	LossSeveral     = "n_gt_1"
	LossLogprobs    = "logprobs"
	LossEcho        = "echo"
	LossToolCall    = "tool_call"
	LossReasoning   = "reasoning"
	LossTokenPrompt = "token_prompt"
	LossPath        = "path"
	LossNotJSON     = "not_json"
	LossEngineError = "engine_error"
	LossTooLong     = "too_long"
	LossUnaryBegun  = "answer_begun"
	LossMoves       = "max_moves"
	LossRefused     = "continuation_refused"
)

// LossReasons lists every loss code, for the metric's labels.
var LossReasons = []string{LossSeveral, LossLogprobs, LossEcho, LossToolCall, LossReasoning, LossTokenPrompt, LossPath,
	LossNotJSON, LossEngineError, LossTooLong, LossUnaryBegun, LossMoves, LossRefused}

var LossText = map[string]string{
	LossSeveral:     "n > 1: several answers in one stream",
	LossLogprobs:    "the stream carries logprobs",
	LossEcho:        "echo: the prompt is part of the answer",
	LossToolCall:    "a tool call was half written",
	LossReasoning:   "reasoning text the engine cannot be handed back",
	LossTokenPrompt: "a prompt of token ids or several prompts",
	LossPath:        "vigil continues streams of /v1/completions and /v1/chat/completions only",
	LossNotJSON:     "the request or the stream is not the JSON vigil reads",
	LossEngineError: "the engine had ended the stream with an error",
	LossTooLong:     "the answer was too long to keep for a continuation",
	LossUnaryBegun:  "the answer had begun",
	LossMoves:       "it was moved the most times allowed (admission.max_moves)",
	LossRefused:     "the engine refused to continue it",
}

// Paths whose streams vigil knows how to continue.
const (
	pathCompletions = "/v1/completions"
	pathChat        = "/v1/chat/completions"
)

// defaultCompletionMaxTokens is vLLM's max_tokens for /v1/completions
// when the request names none.
const defaultCompletionMaxTokens = 16

// Continuation is the request that goes on with a stream after s: body is
// the original request's. It says why not (a Loss* code) when the
// continuation could not be exact.
func Continuation(path string, body []byte, s SoFar) ([]byte, string) {
	if s.Why != "" {
		return nil, s.Why
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, LossNotJSON
	}
	if why := requestNotContinuable(req); why != "" {
		return nil, why
	}
	if s.Text == "" {
		return body, "" // nothing sent yet: the request as it was
	}
	switch path {
	case pathCompletions:
		var prompt string
		if json.Unmarshal(req["prompt"], &prompt) != nil {
			var one []string
			if json.Unmarshal(req["prompt"], &one) != nil || len(one) != 1 {
				return nil, LossTokenPrompt
			}
			prompt = one[0]
		}
		req["prompt"] = mustJSON(prompt + s.Text)
		if !lessTokens(req, "max_tokens", s.Tokens) {
			req["max_tokens"] = mustJSON(max(1, defaultCompletionMaxTokens-s.Tokens))
		}
	case pathChat:
		var msgs []json.RawMessage
		if json.Unmarshal(req["messages"], &msgs) != nil || len(msgs) == 0 {
			return nil, LossNotJSON
		}
		msgs = append(msgs, mustJSON(map[string]string{"role": "assistant", "content": s.Text}))
		req["messages"] = mustJSON(msgs)
		req["continue_final_message"] = json.RawMessage("true")
		req["add_generation_prompt"] = json.RawMessage("false")
		lessTokens(req, "max_tokens", s.Tokens)
		lessTokens(req, "max_completion_tokens", s.Tokens)
	default:
		return nil, LossPath
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
		return LossSeveral
	case truthy("logprobs") || truthy("top_logprobs"):
		return LossLogprobs
	case truthy("echo"):
		return LossEcho
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

// Splice turns the continuation's events into the cut stream's: its
// first events announcing the role again are dropped, and every event
// carries the original stream's id. It returns nil for a dropped event.
func Splice(ev []byte, origID string, s *SpliceState) []byte {
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
	if s.Sent > 0 && bytes.Contains(data, []byte(`"usage"`)) {
		ev = withUsageSoFar(ev, data, s.Sent)
	}
	if origID == "" || c.ID == "" || c.ID == origID {
		return ev
	}
	return bytes.Replace(ev, mustJSON(c.ID), mustJSON(origID), 1)
}

// SpliceState is what Splice remembers across a continuation's events.
type SpliceState struct {
	content bool // an event with more than a role went through
	// Sent is the tokens the cut stream had sent: the continuation's
	// usage counts them as prompt, the client as completion.
	Sent int
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

// ErrorEvent ends a stream that cannot go on, in the shape the OpenAI
// SDKs raise as an APIError (a data event with an "error" object).
func ErrorEvent(code, message string) []byte {
	type errorDetail struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	}
	type errorBody struct {
		Error errorDetail `json:"error"`
	}
	b := mustJSON(errorBody{Error: errorDetail{Message: message, Type: "server_error", Code: code}})
	return append(append([]byte("data: "), b...), "\n\n"...)
}
