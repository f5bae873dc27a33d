package enginesim

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Version is what GET /version reports.
const Version = "0.11.0+vigil-sim"

// maxBody bounds a request body; vLLM has no small limit, but a simulator
// has no use for more.
const maxBody = 16 << 20

// Handler serves the OpenAI-compatible API plus /metrics, /health, /version,
// behind the API-server faults (Wedge, StarveAPI, FailEndpoint).
func (e *Engine) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", e.health)
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"version": Version})
	})
	mux.HandleFunc("GET /metrics", e.metrics)
	// vLLM's sleep mode (its development endpoints).
	mux.HandleFunc("GET /is_sleeping", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"is_sleeping": e.Asleep()})
	})
	mux.HandleFunc("POST /sleep", func(w http.ResponseWriter, _ *http.Request) { e.Sleep(); w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("POST /wake_up", func(w http.ResponseWriter, _ *http.Request) { e.WakeUp(); w.WriteHeader(http.StatusOK) })
	mux.Handle("GET /v1/models", e.auth(http.HandlerFunc(e.models)))
	mux.Handle("POST /v1/completions", e.auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.generate(w, r, false)
	})))
	mux.Handle("POST /v1/chat/completions", e.auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.generate(w, r, true)
	})))
	mux.Handle("/v1/", e.auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "NotFoundError", "Not Found")
	})))
	return e.apiFaults(mux)
}

// apiFaults puts the API server's own faults in front of every endpoint. A
// wedged server holds each request, answering nothing, until its client
// gives up or the wedge is cleared (then serves it); a failing endpoint
// answers its status code with an OpenAI-shaped error, before any key check.
func (e *Engine) apiFaults(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := e.starved(); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			case <-e.deadCh:
				t.Stop()
				panic(http.ErrAbortHandler)
			}
		}
		wedge, code := e.apiFault(r.URL.Path)
		for wedge != nil {
			select {
			case <-wedge: // cleared: serve as things are now
				wedge, code = e.apiFault(r.URL.Path)
			case <-r.Context().Done():
				return
			case <-e.deadCh:
				panic(http.ErrAbortHandler)
			}
		}
		if code != 0 {
			writeError(w, code, errorType(code), fmt.Sprintf("%s failed (simulated fault): %d %s",
				r.URL.Path, code, http.StatusText(code)))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// errorType names a status the way vLLM's error bodies do ("NotFoundError",
// "ServiceUnavailableError", "InternalServerError").
func errorType(code int) string {
	t := strings.ReplaceAll(http.StatusText(code), " ", "")
	if t == "" {
		return "Error"
	}
	if !strings.HasSuffix(t, "Error") {
		t += "Error"
	}
	return t
}

func (e *Engine) health(w http.ResponseWriter, _ *http.Request) {
	select {
	case <-e.deadCh:
		// vLLM answers 503 once its engine core is dead (and exits soon after).
		w.WriteHeader(http.StatusServiceUnavailable)
	default:
		w.WriteHeader(http.StatusOK)
	}
}

func (e *Engine) metrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	created := float64(e.wallStart.UnixMilli()) / 1000
	_ = e.expo.writeAs(w, e.cfg.Metrics, created, e.cfg.ranks())
}

func (e *Engine) auth(next http.Handler) http.Handler {
	if e.cfg.APIKey == "" {
		return next
	}
	want := []byte("Bearer " + e.cfg.APIKey)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			writeErrorCode(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
				"Incorrect API key provided.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (e *Engine) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": e.cfg.Model, "object": "model", "created": time.Now().Unix(), "owned_by": "vllm",
			"root": e.cfg.Model, "parent": nil, "max_model_len": e.cfg.MaxModelLen,
		}},
	})
}

// SimParams is the "vigil_sim" request extension: it lets a benchmark set
// token counts exactly instead of having them estimated from text.
type SimParams struct {
	PromptTokens int    `json:"prompt_tokens"`
	PrefixTokens int    `json:"prefix_tokens"`
	PrefixID     string `json:"prefix_id"`
	OutputTokens int    `json:"output_tokens"`
}

type genRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            json.RawMessage `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	// AddGenerationPrompt and ContinueFinalMessage are vLLM's chat
	// template switches: continue_final_message leaves the last
	// (assistant) message open for the model to go on writing.
	AddGenerationPrompt  *bool `json:"add_generation_prompt"`
	ContinueFinalMessage bool  `json:"continue_final_message"`
	StreamOptions        *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Sim *SimParams `json:"vigil_sim"`
}

// badRequest is a validation failure reported as 400 (or code when set).
type badRequest struct {
	code int
	typ  string
	msg  string
}

func (b *badRequest) Error() string { return b.msg }

func invalid(format string, a ...any) error {
	return &badRequest{code: http.StatusBadRequest, typ: "BadRequestError", msg: fmt.Sprintf(format, a...)}
}

// estimateTokens approximates a tokenizer: about four characters a token.
func estimateTokens(chars int) int { return max(1, (chars+3)/4) }

func promptTokens(raw json.RawMessage) (int, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return estimateTokens(len(s)), nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil && len(ss) > 0 {
		return estimateTokens(len(strings.Join(ss, ""))), nil
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return len(ids), nil
	}
	var idss [][]int
	if json.Unmarshal(raw, &idss) == nil && len(idss) > 0 {
		n := 0
		for _, x := range idss {
			n += len(x)
		}
		if n > 0 {
			return n, nil
		}
	}
	return 0, invalid("prompt must be a string, a list of strings or a list of token ids")
}

func messageTokens(raw json.RawMessage) (int, error) {
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &msgs); err != nil || len(msgs) == 0 {
		return 0, invalid("messages must be a non-empty list of messages")
	}
	chars := 0
	for i, m := range msgs {
		if m.Role == "" {
			return 0, invalid("messages[%d].role is required", i)
		}
		var s string
		var parts []struct {
			Text string `json:"text"`
		}
		switch {
		case len(m.Content) == 0 || string(m.Content) == "null":
		case json.Unmarshal(m.Content, &s) == nil:
			chars += len(s)
		case json.Unmarshal(m.Content, &parts) == nil:
			for _, p := range parts {
				chars += len(p.Text)
			}
		default:
			return 0, invalid("messages[%d].content must be a string or a list of parts", i)
		}
	}
	// A few tokens per message for the chat template.
	return estimateTokens(chars) + 4*len(msgs), nil
}

// parse validates a body and builds the scheduler request.
func (e *Engine) parse(body []byte, chat bool) (*genRequest, *request, error) {
	var g genRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&g); err != nil {
		return nil, nil, invalid("invalid JSON body: %v", err)
	}
	if g.Model != "" && g.Model != e.cfg.Model {
		return nil, nil, &badRequest{code: http.StatusNotFound, typ: "NotFoundError",
			msg: fmt.Sprintf("The model `%s` does not exist.", g.Model)}
	}
	var prompt int
	var err error
	if chat {
		if len(g.Messages) == 0 {
			return nil, nil, invalid("messages is required")
		}
		if g.ContinueFinalMessage && (g.AddGenerationPrompt == nil || *g.AddGenerationPrompt) {
			// vLLM's own check: both would open a new message and continue
			// the last one at once.
			return nil, nil, invalid("continue_final_message and add_generation_prompt cannot both be True.")
		}
		prompt, err = messageTokens(g.Messages)
	} else {
		if len(g.Prompt) == 0 || string(g.Prompt) == "null" {
			return nil, nil, invalid("prompt is required")
		}
		prompt, err = promptTokens(g.Prompt)
	}
	if err != nil {
		return nil, nil, err
	}
	maxTok := g.MaxTokens
	if maxTok == nil {
		maxTok = g.MaxCompletionTokens
	}
	if maxTok != nil && *maxTok < 1 {
		return nil, nil, invalid("max_tokens must be at least 1, got %d.", *maxTok)
	}
	target, reason := 16, reasonLength
	if maxTok != nil {
		target = *maxTok
	}
	var prefixID string
	var prefixTokens int
	if s := g.Sim; s != nil {
		if s.PromptTokens < 0 || s.PrefixTokens < 0 || s.OutputTokens < 0 {
			return nil, nil, invalid("vigil_sim token counts must not be negative")
		}
		if s.PromptTokens > 0 {
			prompt = s.PromptTokens
		}
		if s.PrefixTokens > prompt {
			return nil, nil, invalid("vigil_sim.prefix_tokens %d exceeds the prompt's %d tokens", s.PrefixTokens, prompt)
		}
		if s.PrefixID != "" {
			prefixID, prefixTokens = s.PrefixID, s.PrefixTokens
		}
		if s.OutputTokens > 0 && (maxTok == nil || s.OutputTokens <= *maxTok) {
			target, reason = s.OutputTokens, reasonStop
		}
	}
	if prompt+target > e.cfg.MaxModelLen {
		return nil, nil, invalid("This model's maximum context length is %d tokens. However, you requested %d tokens "+
			"(%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			e.cfg.MaxModelLen, prompt+target, prompt, target)
	}
	if prompt+target > e.cfg.KVCacheTokens {
		return nil, nil, invalid("request needs %d tokens of KV cache, more than the engine's %d",
			prompt+target, e.cfg.KVCacheTokens)
	}
	prefix := "cmpl-"
	if chat {
		prefix = "chatcmpl-"
	}
	id := prefix + "sim" + strconv.FormatUint(e.newID(), 10)
	return &g, newRequest(id, prompt, prefixTokens, prefixID, target, reason), nil
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	TotalTokens      int `json:"total_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

func (e *Engine) generate(w http.ResponseWriter, hr *http.Request, chat bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, hr.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "cannot read body: "+err.Error())
		return
	}
	g, r, err := e.parse(body, chat)
	if err != nil {
		var br *badRequest
		if errors.As(err, &br) {
			writeError(w, br.code, br.typ, br.msg)
		} else {
			writeError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		}
		return
	}
	if !e.submit(r) {
		panic(http.ErrAbortHandler) // the core is dead: drop the connection
	}
	created := time.Now().Unix()
	ctx := hr.Context()
	text := newTextGen(completionContext(g.Prompt))
	if chat {
		text = newTextGen(chatContext(g.Messages, g.ContinueFinalMessage))
	}
	var sw *sseWriter
	if g.Stream {
		sw = &sseWriter{w: w, rc: http.NewResponseController(w), chat: chat, id: r.id, model: e.cfg.Model, text: text,
			created: created, includeUsage: g.StreamOptions != nil && g.StreamOptions.IncludeUsage}
		sw.start()
	}
	sent := 0
	for {
		select {
		case <-r.notify:
		case <-ctx.Done():
			if e.cfg.AbortOnDisconnect {
				e.cancel(r)
			}
			return
		case <-e.deadCh:
			panic(http.ErrAbortHandler)
		}
		gen, done, reason := r.snapshot()
		if sw != nil {
			sw.tokens(sent, gen, done, reason)
			sent = gen
		}
		if !done {
			continue
		}
		u := usage{PromptTokens: r.prompt, CompletionTokens: gen, TotalTokens: r.prompt + gen}
		if sw != nil {
			sw.finish(u)
			return
		}
		text := text.take(gen)
		var choice map[string]any
		object := "text_completion"
		if chat {
			object = "chat.completion"
			choice = map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text},
				"logprobs": nil, "finish_reason": reason, "stop_reason": nil}
		} else {
			choice = map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": reason, "stop_reason": nil}
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": r.id, "object": object, "created": created,
			"model": e.cfg.Model, "choices": []any{choice}, "usage": u})
		return
	}
}

// sseWriter writes OpenAI streaming chunks, flushing each batch as produced.
type sseWriter struct {
	w            http.ResponseWriter
	rc           *http.ResponseController
	chat         bool
	id, model    string
	created      int64
	includeUsage bool
	roleSent     bool
	text         *textGen
}

func (s *sseWriter) start() {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	s.w.WriteHeader(http.StatusOK)
	_ = s.rc.Flush()
}

func (s *sseWriter) chunk(choices []any, u *usage) {
	obj := "text_completion"
	if s.chat {
		obj = "chat.completion.chunk"
	}
	m := map[string]any{"id": s.id, "object": obj, "created": s.created, "model": s.model, "choices": choices}
	if s.includeUsage {
		m["usage"] = u // null on every chunk but the last, as OpenAI does
	}
	b, _ := json.Marshal(m)
	_, _ = fmt.Fprintf(s.w, "data: %s\n\n", b)
}

func (s *sseWriter) choice(text string, finish any) any {
	if !s.chat {
		return map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": finish, "stop_reason": nil}
	}
	delta := map[string]any{"content": text}
	if !s.roleSent {
		delta["role"] = "assistant"
		s.roleSent = true
	}
	return map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}
}

// tokens writes one chunk per token from sent to gen; the last token of a
// finished request carries finish_reason.
func (s *sseWriter) tokens(sent, gen int, done bool, reason string) {
	if gen == sent && !done {
		return
	}
	for i := sent; i < gen; i++ {
		var finish any
		if done && i == gen-1 {
			finish = reason
		}
		s.chunk([]any{s.choice(s.text.next(), finish)}, nil)
	}
	if done && gen == sent {
		s.chunk([]any{s.choice("", reason)}, nil)
	}
	_ = s.rc.Flush()
}

func (s *sseWriter) finish(u usage) {
	if s.includeUsage {
		s.chunk([]any{}, &u)
	}
	_, _ = io.WriteString(s.w, "data: [DONE]\n\n")
	_ = s.rc.Flush()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, typ, msg string) {
	writeErrorCode(w, code, typ, code, msg)
}

// writeErrorCode writes OpenAI's error shape: {"error": {message, type, param, code}}.
func writeErrorCode(w http.ResponseWriter, status int, typ string, code any, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"message": msg, "type": typ, "param": nil, "code": code}})
}
