package probes

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// closedURL is a loopback address nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// hangUp answers nothing: it closes the connection, like curl's
// "empty reply from server".
func hangUp(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

func TestFailuresAreClassifiedTheWayTheWatchdogReadsThem(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	cases := []struct {
		name    string
		handler http.HandlerFunc
		url     string // overrides the server
		class   ErrorClass
		code    int
		unauth  bool
		down    bool
	}{
		{name: "a port nobody listens on is refused", url: "closed", class: ClassRefused, down: true},
		{name: "a connection closed without a reply is reset", handler: hangUp, class: ClassReset, down: true},
		{name: "an engine that never answers is a timeout, not down",
			handler: func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-block:
				case <-r.Context().Done():
				}
			}, class: ClassTimeout},
		{name: "a 503 is an http status and counts toward down",
			handler: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }, class: ClassHTTPStatus, code: 503, down: true},
		{name: "a 401 is an http status that says misconfigured",
			handler: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(401) }, class: ClassHTTPStatus, code: 401, unauth: true},
		{name: "a 403 is misconfigured too",
			handler: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(403) }, class: ClassHTTPStatus, code: 403, unauth: true},
		{name: "a 200 is a success",
			handler: func(w http.ResponseWriter, _ *http.Request) {}, class: ClassNone, code: 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := tc.url
			if url == "closed" {
				url = closedURL(t)
			} else {
				srv := httptest.NewServer(tc.handler)
				t.Cleanup(srv.Close)
				url = srv.URL
			}
			obs := Health(context.Background(), Target{URL: url, Timeout: 200 * time.Millisecond})
			if obs.Class != tc.class || obs.Code != tc.code {
				t.Fatalf("got class %q code %d (%s), want class %q code %d", obs.Class, obs.Code, obs.Error, tc.class, tc.code)
			}
			if obs.Unauthorized() != tc.unauth {
				t.Errorf("Unauthorized() = %v, want %v", obs.Unauthorized(), tc.unauth)
			}
			if obs.Unreachable() != tc.down {
				t.Errorf("Unreachable() = %v, want %v", obs.Unreachable(), tc.down)
			}
			if obs.OK() != (tc.class == ClassNone) {
				t.Errorf("OK() = %v for class %q", obs.OK(), obs.Class)
			}
			if obs.Endpoint != EndpointHealth {
				t.Errorf("endpoint %q", obs.Endpoint)
			}
		})
	}
}

func TestOneLineOutcomesReadLikeAnOperatorWouldSayThem(t *testing.T) {
	t.Parallel()
	cases := []struct {
		obs  Observation
		want string
	}{
		{Observation{Endpoint: "/health", Code: 200, Latency: 4200 * time.Microsecond}, "200 in 4ms"},
		{Observation{Endpoint: "/health", Code: 503, Class: ClassHTTPStatus, Latency: 2 * time.Millisecond}, "503 in 2ms"},
		{Observation{Endpoint: "/health", Class: ClassRefused}, "refused"},
		{Observation{Endpoint: "/health", Class: ClassReset}, "reset (empty reply)"},
		{Observation{Endpoint: "/health", Class: ClassTimeout, Latency: 10*time.Second + 3*time.Millisecond}, "timeout after 10s"},
		{Observation{}, "not probed"},
	}
	for _, tc := range cases {
		if got := tc.obs.String(); got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.obs, got, tc.want)
		}
	}
}

func TestTheAPIKeyIsSentAsBearerAndNeverReported(t *testing.T) {
	t.Parallel()
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Authorization")
		http.Error(w, "nope", http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	obs := Health(context.Background(), Target{URL: srv.URL, APIKey: "sk-very-secret"})
	if got != "Bearer sk-very-secret" {
		t.Fatalf("Authorization header %q", got)
	}
	if strings.Contains(obs.Error+obs.String(), "very-secret") {
		t.Fatalf("the key leaked into the observation: %+v", obs)
	}
}
