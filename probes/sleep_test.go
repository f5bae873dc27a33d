package probes

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestSleepingReadsVLLMsSleepModeAndNothingElse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name          string
		code          int
		body          string
		asleep, known bool
	}{
		{"asleep", 200, `{"is_sleeping": true}`, true, true},
		{"awake", 200, `{"is_sleeping": false}`, false, true},
		{"no sleep mode", 404, `{"detail":"Not Found"}`, false, false},
		{"not the answer", 200, `{"status":"ok"}`, false, false},
		{"not JSON", 200, `<html>`, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != EndpointSleeping {
					t.Errorf("asked %s", r.URL.Path)
				}
				w.WriteHeader(c.code)
				_, _ = w.Write([]byte(c.body))
			}))
			defer srv.Close()
			asleep, known := Sleeping(t.Context(), Target{URL: srv.URL})
			if asleep != c.asleep || known != c.known {
				t.Fatalf("asleep %v known %v, want %v %v", asleep, known, c.asleep, c.known)
			}
		})
	}
}
