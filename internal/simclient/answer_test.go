package simclient

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestReadAnswer(t *testing.T) {
	resp := func(ct, body string) *http.Response {
		return &http.Response{Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(strings.NewReader(body))}
	}
	const sse = "text/event-stream"
	for _, tc := range []struct {
		name, ct, body string
		text           string
		whole          bool
		code           string
	}{
		{"a JSON completion", "application/json", `{"choices":[{"text":"hi"}]}`, "hi", true, ""},
		{"a JSON chat answer", "application/json", `{"choices":[{"message":{"content":"hi"}}]}`, "hi", true, ""},
		{"a whole stream", sse, "data: {\"id\":\"a\",\"choices\":[{\"delta\":{\"content\":\"h\"}}]}\n\ndata: {\"id\":\"a\",\"choices\":[{\"delta\":{\"content\":\"i\"}}]}\n\ndata: [DONE]\n\n", "hi", true, ""},
		{"a stream cut before its [DONE]", sse, "data: {\"id\":\"a\",\"choices\":[{\"text\":\"h\"}]}\n\n", "h", false, ""},
		{"a stream under two ids", sse, "data: {\"id\":\"a\",\"choices\":[{\"text\":\"h\"}]}\n\ndata: {\"id\":\"b\",\"choices\":[{\"text\":\"i\"}]}\n\ndata: [DONE]\n\n", "hi", false, ""},
		{"a stream ended by an error event", sse, "data: {\"id\":\"a\",\"choices\":[{\"text\":\"h\"}]}\n\ndata: {\"error\":{\"code\":\"vigil_n_gt_1\"}}\n\n", "h", false, "vigil_n_gt_1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := ReadAnswer(resp(tc.ct, tc.body))
			if a.Text != tc.text || a.Whole() != tc.whole || a.ErrorCode != tc.code {
				t.Fatalf("got %+v (whole %t), want text %q, whole %t, code %q", a, a.Whole(), tc.text, tc.whole, tc.code)
			}
		})
	}
}
