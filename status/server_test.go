package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/overrides"
	"github.com/vigil-dev/vigil/pool"
	"github.com/vigil-dev/vigil/watchdog"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// limits stands in for the limiter behind the override manager.
type limits struct {
	mu     sync.Mutex
	values map[string]string
}

func (l *limits) Get(key string) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.values[key], nil
}

func (l *limits) Set(key, value string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.values[key] = value
	return nil
}

func newManager(t *testing.T) (*overrides.Manager, *limits) {
	t.Helper()
	live := &limits{values: map[string]string{"admission.max_in_flight": "32"}}
	m, err := overrides.New(overrides.Options{Applier: live, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return m, live
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestMetricsExposeVigilsOwnCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "vigil_test_pages_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	srv := httptest.NewServer(New(Options{Gatherer: reg}).Handler())
	defer srv.Close()
	code, body := get(t, srv.URL+"/metrics")
	if code != 200 || !strings.Contains(body, "vigil_test_pages_total 3") {
		t.Fatalf("/metrics = %d\n%s", code, body)
	}
}

func TestStatusIsTheDocumentPeersRead(t *testing.T) {
	verdict := watchdog.Verdict{
		State: watchdog.StateSaturated, Reason: "40 waiting, counters moving", At: t0,
		Evidence: watchdog.Evidence{Waiting: 40, Running: 12, TokensPerSec: 2340},
	}
	m, _ := newManager(t)
	if err := m.Set(configs.Override{Key: "admission.max_in_flight", Value: "64", Until: t0.Add(time.Hour), Reason: "load test"}); err != nil {
		t.Fatal(err)
	}
	s := New(Options{
		Overrides: m,
		Now:       func() time.Time { return t0 },
		Snapshot: func() Snapshot {
			return Snapshot{
				Node: "node1", Version: "1.0.0", Verdict: verdict,
				Recovery: map[string]any{"drained": true, "step": "wait_ready"},
				Limiter:  map[string]any{"in_flight": 32, "queued": 8},
			}
		},
	})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	code, body := get(t, srv.URL+"/status")
	if code != 200 || !strings.Contains(body, "\n  \"node\": \"node1\"") {
		t.Fatalf("/status = %d, want pretty JSON:\n%s", code, body)
	}
	var doc struct {
		Node      string             `json:"node"`
		At        time.Time          `json:"at"`
		Verdict   watchdog.Verdict   `json:"verdict"`
		Limiter   map[string]float64 `json:"limiter"`
		Overrides []overrides.Active `json:"overrides"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Node != "node1" || !doc.At.Equal(t0) || doc.Verdict.State != watchdog.StateSaturated ||
		doc.Limiter["in_flight"] != 32 || len(doc.Overrides) != 1 || doc.Overrides[0].Replaced != "32" {
		t.Fatalf("/status decoded = %+v", doc)
	}

	// The contract with the pool view: a peer reads exactly these fields.
	members := pool.Fetch(context.Background(), []string{srv.URL + "/status"}, time.Second)
	want := pool.Member{URL: srv.URL + "/status", Node: "node1", State: "saturated", Waiting: 40, Running: 12, Drained: true}
	if members[0] != want {
		t.Fatalf("pool view of /status = %+v, want %+v", members[0], want)
	}
}

func TestHealthz(t *testing.T) {
	cases := []struct {
		name    string
		healthy func() error
		code    int
		body    string
	}{
		{"a vigil whose loop runs is healthy", nil, 200, "ok"},
		{"a wedged loop answers 503 with the reason", func() error { return errors.New("no cycle for 2m") }, 503, "no cycle for 2m"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(New(Options{Healthy: tc.healthy}).Handler())
			defer srv.Close()
			code, body := get(t, srv.URL+"/healthz")
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Fatalf("/healthz = %d %q", code, body)
			}
		})
	}
}

func TestTheOverrideAPIRoundTripsThroughTheClient(t *testing.T) {
	m, live := newManager(t)
	srv := httptest.NewServer(New(Options{Overrides: m}).Handler())
	defer srv.Close()
	c := NewClient(srv.URL)
	ctx := context.Background()

	a, err := c.SetOverride(ctx, configs.Override{Key: "admission.max_in_flight", Value: "64", Until: t0.Add(2 * time.Hour), Reason: "load test"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Key != "admission.max_in_flight" || a.Value != "64" || a.Replaced != "32" || !a.Until.Equal(t0.Add(2*time.Hour)) || a.Source != overrides.SourceAPI {
		t.Fatalf("SetOverride = %+v", a)
	}
	if v, _ := live.Get("admission.max_in_flight"); v != "64" {
		t.Fatalf("live = %s, want 64", v)
	}
	list, err := c.ListOverrides(ctx)
	if err != nil || len(list) != 1 || list[0].Value != "64" {
		t.Fatalf("ListOverrides = %+v, %v", list, err)
	}
	raw, err := c.Status(ctx)
	if err != nil || !json.Valid(raw) || !strings.Contains(string(raw), `"replaced": "32"`) {
		t.Fatalf("Status = %s, %v", raw, err)
	}
	cleared, err := c.ClearOverride(ctx, "admission.max_in_flight")
	if err != nil || cleared.Value != "64" {
		t.Fatalf("ClearOverride = %+v, %v", cleared, err)
	}
	if v, _ := live.Get("admission.max_in_flight"); v != "32" {
		t.Fatalf("live after clear = %s, want 32", v)
	}

	t.Run("an override without until is a 400 naming the problem", func(t *testing.T) {
		_, err := c.SetOverride(ctx, configs.Override{Key: "admission.max_in_flight", Value: "64", Reason: "load test"})
		var apiErr *APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "until is required") {
			t.Fatalf("SetOverride without until = %v, want a 400 saying until is required", err)
		}
		if !strings.Contains(err.Error(), srv.URL+"/overrides") {
			t.Fatalf("error %q does not name the URL", err)
		}
	})
	t.Run("clearing a key with no override is a 404", func(t *testing.T) {
		_, err := c.ClearOverride(ctx, "admission.max_queue")
		var apiErr *APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
			t.Fatalf("ClearOverride = %v, want 404", err)
		}
	})
}

func TestOverrideRequestsAsOperatorsTypeThem(t *testing.T) {
	cases := []struct {
		name string
		body string
		code int
		want string
	}{
		{"a bare number is a value", `{"key":"admission.max_in_flight","value":64,"until":"2025-06-01T14:00:00Z","reason":"load test"}`,
			201, `"value": "64"`},
		{"an override without until is refused by name", `{"key":"admission.max_in_flight","value":"64","reason":"load test"}`,
			400, "until is required"},
		{"a misspelt until is refused, never taken as no expiry", `{"key":"admission.max_in_flight","value":"64","untill":"2025-06-01T14:00:00Z","reason":"x"}`,
			400, `unknown field \"untill\"`},
		{"a vague until is refused", `{"key":"admission.max_in_flight","value":"64","until":"tomorrow","reason":"x"}`,
			400, "not an RFC 3339 time"},
		{"a key outside the list is refused", `{"key":"engine.url","value":"http://x","until":"2025-06-01T14:00:00Z","reason":"x"}`,
			400, "cannot be overridden"},
		{"an object is not a value", `{"key":"admission.max_in_flight","value":{"n":64},"until":"2025-06-01T14:00:00Z","reason":"x"}`,
			400, "string, number or boolean"},
		{"not JSON at all", `key=admission.max_in_flight`, 400, "invalid override: body"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := newManager(t)
			srv := httptest.NewServer(New(Options{Overrides: m}).Handler())
			defer srv.Close()
			resp, err := http.Post(srv.URL+"/overrides", "application/json", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.want) {
				t.Fatalf("POST /overrides = %d %s, want %d mentioning %s", resp.StatusCode, body, tc.code, tc.want)
			}
		})
	}
}

func TestWithoutAnOverrideManagerTheAPISaysSo(t *testing.T) {
	srv := httptest.NewServer(New(Options{}).Handler())
	defer srv.Close()
	code, body := get(t, srv.URL+"/overrides")
	if code != 503 || !strings.Contains(body, "not available") {
		t.Fatalf("GET /overrides = %d %s", code, body)
	}
	if code, _ := get(t, srv.URL+"/metrics"); code != 404 {
		t.Fatalf("/metrics without a Gatherer = %d, want 404", code)
	}
}

func TestTheClientSaysWhenVigilIsNotRunning(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.Listener.Addr().String()
	srv.Close()
	c := NewClient(addr) // the bare status.listen value
	_, err := c.ListOverrides(context.Background())
	want := fmt.Sprintf("http://%s/overrides", addr)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "is vigil running? (status.listen)") {
		t.Fatalf("ListOverrides against nothing = %v, want the URL and a hint", err)
	}
}

func TestTheListenerStaysOnLoopback(t *testing.T) {
	cases := []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:9108", true},
		{"[::1]:9108", true},
		{"localhost:9108", true},
		{"0.0.0.0:9108", false},
		{":9108", false},
		{"10.1.2.3:9108", false},
		{"node1.example.com:9108", false},
		{"9108", false},
	}
	for _, tc := range cases {
		t.Run(tc.addr, func(t *testing.T) {
			err := checkLoopback(tc.addr)
			if (err == nil) != tc.ok {
				t.Fatalf("checkLoopback(%q) = %v, want ok=%v", tc.addr, err, tc.ok)
			}
		})
	}
	t.Run("ListenAndServe refuses a remote address without AllowRemote", func(t *testing.T) {
		err := New(Options{Listen: "0.0.0.0:0"}).ListenAndServe(context.Background())
		if err == nil || !strings.Contains(err.Error(), "not a loopback address") {
			t.Fatalf("ListenAndServe(0.0.0.0) = %v", err)
		}
	})
}

func TestServeAnswersThenStopsWithItsContext(t *testing.T) {
	s := New(Options{Listen: "127.0.0.1:0"})
	ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	code, body := get(t, "http://"+ln.Addr().String()+"/healthz")
	if code != 200 || body != "ok\n" {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve = %v, want nil after shutdown", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
}

func TestAnEmptyListenDisablesTheListener(t *testing.T) {
	if err := New(Options{}).ListenAndServe(context.Background()); err != nil {
		t.Fatalf("ListenAndServe with no address = %v, want nil", err)
	}
}
