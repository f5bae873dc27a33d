package probes

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestHealth(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		status int
		ok     bool
	}{
		{"a live engine core answers 200", 200, true},
		{"a dead engine core answers 503", 503, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != EndpointHealth {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(tc.status)
			}))
			t.Cleanup(srv.Close)
			obs := Health(context.Background(), Target{URL: srv.URL + "/"})
			if obs.OK() != tc.ok || obs.Code != tc.status {
				t.Fatalf("got %+v", obs)
			}
		})
	}
}
