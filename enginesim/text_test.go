package enginesim

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// streamText posts body to path and returns the streamed text, chunk by
// chunk, and whether the stream ended with [DONE].
func streamText(t *testing.T, url, path, body string) (chunks []string, done bool) {
	t.Helper()
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d", path, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			return chunks, true
		}
		var c struct {
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			if s := ch.Text + ch.Delta.Content; s != "" {
				chunks = append(chunks, s)
			}
		}
	}
	return chunks, false
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// The text is deterministic and follows from the context: a request that
// continues another with the text so far streams exactly the rest.
func TestAContinuedStreamIsExactlyTheRestOfTheUninterruptedOne(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Scale = 100
	e := New(cfg)
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(func() { srv.Close(); e.Close() })
	const n, cut = 24, 9

	t.Run("completions: the prompt plus the text so far, max_tokens less what was sent", func(t *testing.T) {
		whole, done := streamText(t, srv.URL, "/v1/completions",
			`{"model":"`+cfg.Model+`","prompt":"Tell me a story.","max_tokens":24,"stream":true}`)
		again, _ := streamText(t, srv.URL, "/v1/completions",
			`{"model":"`+cfg.Model+`","prompt":"Tell me a story.","max_tokens":24,"stream":true}`)
		if !done || len(whole) != n || strings.Join(whole, "") != strings.Join(again, "") {
			t.Fatalf("the same request streamed %q then %q", whole, again)
		}
		sofar := strings.Join(whole[:cut], "")
		rest, _ := streamText(t, srv.URL, "/v1/completions",
			`{"model":"`+cfg.Model+`","prompt":`+quote("Tell me a story."+sofar)+`,"max_tokens":15,"stream":true}`)
		if got, want := sofar+strings.Join(rest, ""), strings.Join(whole, ""); got != want {
			t.Fatalf("continued text\n %q\nuninterrupted\n %q", got, want)
		}
	})
	t.Run("chat: an assistant message with the content so far, continue_final_message", func(t *testing.T) {
		msgs := `[{"role":"system","content":"Be brief."},{"role":"user","content":"Tell me a story."}`
		whole, done := streamText(t, srv.URL, "/v1/chat/completions",
			`{"model":"`+cfg.Model+`","messages":`+msgs+`],"max_tokens":24,"stream":true}`)
		if !done || len(whole) != n {
			t.Fatalf("streamed %d chunks (done %v)", len(whole), done)
		}
		sofar := strings.Join(whole[:cut], "")
		rest, _ := streamText(t, srv.URL, "/v1/chat/completions",
			`{"model":"`+cfg.Model+`","messages":`+msgs+`,{"role":"assistant","content":`+quote(sofar)+`}],`+
				`"continue_final_message":true,"add_generation_prompt":false,"max_tokens":15,"stream":true}`)
		if got, want := sofar+strings.Join(rest, ""), strings.Join(whole, ""); got != want {
			t.Fatalf("continued text\n %q\nuninterrupted\n %q", got, want)
		}
	})
	t.Run("chat: continue_final_message with add_generation_prompt is refused, as by vLLM", func(t *testing.T) {
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(
			`{"model":"`+cfg.Model+`","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"he"}],"continue_final_message":true}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("status %d, want 400", resp.StatusCode)
		}
	})
}
