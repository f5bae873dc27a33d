package probes

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestReadSlots(t *testing.T) {
	const two = `[{"id":0,"n_ctx":2048,"speculative":false,"is_processing":true,"id_task":41,"next_token":[{"has_next_token":true,"n_remain":12,"n_decoded":12}]},
{"id":1,"n_ctx":2048,"speculative":false,"is_processing":false}]`
	for _, tc := range []struct {
		name    string
		code    int
		body    string
		want    Slots
		wantErr string
	}{
		{"two slots, one busy", 200, two, Slots{Total: 2, Processing: 1}, ""},
		{"disabled (--no-slots)", 501, `{"error":{"code":501,"message":"This server does not support slots endpoint."}}`, Slots{}, "501"},
		{"not a slot list", 200, `{"status":"ok"}`, Slots{}, "not llama.cpp's slot list"},
		{"entries without ids", 200, `[{"x":1}]`, Slots{}, "without an id"},
		{"empty", 200, `[]`, Slots{}, "empty list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != EndpointSlots {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(tc.code)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			got, err := ReadSlots(context.Background(), Target{URL: srv.URL})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v, want %+v", got, err, tc.want)
			}
		})
	}
}
