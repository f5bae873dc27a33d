package engineloss

import (
	"encoding/json"
	"strings"
	"testing"
)

func sse(Events ...string) []byte {
	var b strings.Builder
	for _, e := range Events {
		b.WriteString("data: " + e + "\n\n")
	}
	return []byte(b.String())
}

// What a cut stream sent, read from its events.
func TestReadSofar(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		buf    []byte
		want   SoFar
		wantOK bool
	}{
		{"completion text in pieces", sse(`{"id":"cmpl-1","choices":[{"index":0,"text":" al"}]}`, `{"id":"cmpl-1","choices":[{"index":0,"text":"pha"}]}`),
			SoFar{ID: "cmpl-1", Text: " alpha", Tokens: 2}, true},
		{"chat: the role event carries no text", sse(`{"id":"c1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
			`{"id":"c1","choices":[{"index":0,"delta":{"content":" hi"}}]}`), SoFar{ID: "c1", Text: " hi", Tokens: 1}, true},
		{"a finish reason: only the end is missing", sse(`{"id":"c1","choices":[{"index":0,"text":"x","finish_reason":"length"}]}`),
			SoFar{ID: "c1", Text: "x", Tokens: 1, Finished: true}, true},
		{"two choices cannot be continued", sse(`{"id":"c1","choices":[{"index":1,"text":"x"}]}`), SoFar{}, false},
		{"a tool call half written cannot", sse(`{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]}}]}`), SoFar{}, false},
		{"logprobs cannot", sse(`{"id":"c1","choices":[{"index":0,"text":"x","logprobs":{"tokens":["x"]}}]}`), SoFar{}, false},
		{"an error event cannot", sse(`{"error":{"message":"boom"}}`), SoFar{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ReadSoFar(tc.buf)
			if (got.Why == "") != tc.wantOK {
				t.Fatalf("why %q, want continuable %v", got.Why, tc.wantOK)
			}
			if tc.wantOK && got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// The request that goes on where a stream stopped, or why there is none.
func TestContinuation(t *testing.T) {
	t.Parallel()
	so := SoFar{ID: "x", Text: " alpha bravo", Tokens: 2}
	for _, tc := range []struct {
		name, path, body string
		s                SoFar
		want             map[string]string // key: its JSON
		why              string
	}{
		{"completions: the text appended to the prompt, max_tokens less what was sent", pathCompletions,
			`{"model":"m","prompt":"Hi","max_tokens":10,"stream":true}`, so,
			map[string]string{"prompt": `"Hi alpha bravo"`, "max_tokens": "8", "stream": "true"}, ""},
		{"completions without max_tokens: vLLM's 16 less what was sent", pathCompletions,
			`{"model":"m","prompt":["Hi"],"stream":true}`, so, map[string]string{"prompt": `"Hi alpha bravo"`, "max_tokens": "14"}, ""},
		{"chat: an assistant message continued", pathChat,
			`{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_completion_tokens":5,"stream":true}`, so,
			map[string]string{"messages": `[{"role":"user","content":"Hi"},{"content":" alpha bravo","role":"assistant"}]`,
				"continue_final_message": "true", "add_generation_prompt": "false", "max_completion_tokens": "3"}, ""},
		{"nothing sent yet: the request as it was", pathChat, `{"model":"m","messages":[{"role":"user","content":"Hi"}]}`,
			SoFar{ID: "x"}, map[string]string{"messages": `[{"role":"user","content":"Hi"}]`}, ""},
		{"a token-id prompt", pathCompletions, `{"prompt":[1,2,3],"stream":true}`, so, nil, LossTokenPrompt},
		{"n = 2", pathChat, `{"messages":[],"n":2,"stream":true}`, so, nil, LossSeveral},
		{"logprobs asked for", pathChat, `{"messages":[{"role":"user","content":"Hi"}],"logprobs":true}`, so, nil, LossLogprobs},
		{"echo", pathCompletions, `{"prompt":"Hi","echo":true}`, so, nil, LossEcho},
		{"another path", "/v1/responses", `{"input":"Hi"}`, so, nil, LossPath},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, why := Continuation(tc.path, []byte(tc.body), tc.s)
			if why != tc.why {
				t.Fatalf("why %q, want %q", why, tc.why)
			}
			if why != "" {
				return
			}
			var got map[string]json.RawMessage
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.want {
				if string(got[k]) != v {
					t.Errorf("%s = %s, want %s", k, got[k], v)
				}
			}
		})
	}
}

// The continuation's Events join the cut stream: its role event is
// dropped, its id becomes the original's.
func TestSplice(t *testing.T) {
	t.Parallel()
	var st SpliceState
	in := sse(`{"id":"new","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
		`{"id":"new","choices":[{"index":0,"delta":{"content":" charlie"}}]}`,
		`{"id":"new","choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}]}`, `[DONE]`)
	got := string(SpliceAll(in, "orig", &st))
	want := string(sse(`{"id":"orig","choices":[{"index":0,"delta":{"content":" charlie"}}]}`,
		`{"id":"orig","choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}]}`, `[DONE]`))
	if got != want {
		t.Fatalf("spliced\n%s\nwant\n%s", got, want)
	}
}

// Whole Events only: a piece of an event waits for its end.
func TestEventBufferHoldsBackAPartialEvent(t *testing.T) {
	t.Parallel()
	var b EventBuffer
	if got := b.Add([]byte("data: {\"a\":1}\n\ndata: {\"b")); string(got) != "data: {\"a\":1}\n\n" {
		t.Fatalf("first whole event: %q", got)
	}
	if got := b.Add([]byte("\":2}\n")); got != nil {
		t.Fatalf("an unfinished event came out: %q", got)
	}
	if got := b.Add([]byte("\n")); string(got) != "data: {\"b\":2}\n\n" {
		t.Fatalf("second event: %q", got)
	}
}

// A continuation's usage counts the tokens sent before the cut as
// prompt; the client is told the whole stream's.
func TestSpliceGivesTheWholeStreamsUsage(t *testing.T) {
	t.Parallel()
	type usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	}
	st := SpliceState{content: true, Sent: 30}
	in := sse(`{"id":"new","choices":[],"usage":{"prompt_tokens":50,"completion_tokens":70,"total_tokens":120}}`)
	var got struct {
		ID    string `json:"id"`
		Usage usage  `json:"usage"`
	}
	data, _ := eventData(SpliceAll(in, "orig", &st))
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.ID != "orig" || got.Usage != (usage{PromptTokens: 20, CompletionTokens: 100, TotalTokens: 120}) {
		t.Fatalf("got %+v, want id orig, usage 20 + 100 = 120", got)
	}
}
