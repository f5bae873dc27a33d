package probes

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestModels(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		handler http.HandlerFunc
		class   ErrorClass
		first   string
		line    string
	}{
		{
			name: "a model list means the API server is alive",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Write([]byte(`{"object":"list","data":[{"id":"llama-3","object":"model"},{"id":"lora-a","object":"model"}]}`))
			},
			first: "llama-3",
		},
		{
			name: "an empty model list is not ready",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Write([]byte(`{"object":"list","data":[]}`))
			},
			class: ClassOther,
		},
		{
			name: "an HTML page with 200 is not a model list",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Write([]byte(`<html><body>proxy says hi</body></html>`))
			},
			class: ClassOther,
		},
		{
			name:    "a wrong API key is a 401",
			handler: func(w http.ResponseWriter, _ *http.Request) { http.Error(w, `{"error":"Unauthorized"}`, 401) },
			class:   ClassHTTPStatus,
		},
		{name: "an empty reply is reset", handler: hangUp, class: ClassReset},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != EndpointModels {
					http.NotFound(w, r)
					return
				}
				tc.handler(w, r)
			}))
			t.Cleanup(srv.Close)
			obs := Models(context.Background(), Target{URL: srv.URL, Timeout: time.Second})
			if obs.Class != tc.class {
				t.Fatalf("class %q (%s), want %q", obs.Class, obs.Error, tc.class)
			}
			if obs.First() != tc.first {
				t.Fatalf("first model %q, want %q", obs.First(), tc.first)
			}
		})
	}
}

func TestModelsStringNamesTheModel(t *testing.T) {
	t.Parallel()
	obs := ModelsObservation{Observation: Observation{Endpoint: EndpointModels, Code: 200, Latency: 3 * time.Millisecond}, Models: []string{"m"}}
	if got := obs.String(); got != "200 in 3ms (m)" {
		t.Fatalf("got %q", got)
	}
}
