package probes

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

const completionOK = `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"!","finish_reason":"length"}]}`

// waitState polls until the probe leaves "outstanding" or the test times out.
func waitState(t *testing.T, p *CompletionProber) CompletionStatus {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if s := p.Poll(); !s.Outstanding() {
			return s
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("probe still outstanding after 5s")
	return CompletionStatus{}
}

func TestCompletionProbe(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		handler http.HandlerFunc
		state   ProbeState
		pending bool
	}{
		{
			name:    "an engine that answers one token is ok",
			handler: func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(completionOK)) },
			state:   ProbeOK,
		},
		{
			name: "an engine that never answers times the probe out, and that is pending work",
			handler: func(w http.ResponseWriter, r *http.Request) {
				// The server notices the client leaving only once the
				// body is read.
				io.Copy(io.Discard, r.Body)
				<-r.Context().Done()
			},
			state: ProbeTimedOut, pending: true,
		},
		{
			name:    "a wrong API key fails the probe with 401",
			handler: func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "unauthorized", 401) },
			state:   ProbeFailed,
		},
		{
			name:    "a 200 that is not a completion fails the probe",
			handler: func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(`{"ok":true}`)) },
			state:   ProbeFailed,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tc.handler)
			t.Cleanup(srv.Close)
			p := NewCompletionProber(Target{URL: srv.URL}, 150*time.Millisecond, nil)
			t.Cleanup(p.Close)
			if s := p.Poll(); s.State != ProbeIdle || s.String() != "not started" {
				t.Fatalf("before any probe: %+v", s)
			}
			if !p.Start("m") {
				t.Fatal("Start refused with nothing outstanding")
			}
			s := waitState(t, p)
			if s.State != tc.state || s.Pending() != tc.pending {
				t.Fatalf("state %q pending %v (%s), want %q %v", s.State, s.Pending(), s.Observation.Error, tc.state, tc.pending)
			}
			if s.Model != "m" || s.Started.IsZero() {
				t.Fatalf("status does not say what it probed: %+v", s)
			}
		})
	}
}

func TestASlowProbeNeverBlocksTheCycle(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var mu sync.Mutex
	var seen []map[string]any
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen = append(seen, body)
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Write([]byte(completionOK))
	}))
	t.Cleanup(srv.Close)
	t0 := time.Date(2026, 1, 1, 3, 0, 0, 0, time.UTC)
	var clockMu sync.Mutex
	clock := t0
	now := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock }
	p := NewCompletionProber(Target{URL: srv.URL, APIKey: "k"}, 10*time.Second, now)
	t.Cleanup(p.Close)

	start := time.Now()
	if !p.Start("llama") {
		t.Fatal("first Start refused")
	}
	if p.Start("llama") {
		t.Fatal("a second probe started while one is outstanding")
	}
	clockMu.Lock()
	clock = t0.Add(40 * time.Second)
	clockMu.Unlock()
	s := p.Poll()
	if time.Since(start) > time.Second {
		t.Fatal("Start/Poll blocked on the probe")
	}
	if !s.Outstanding() || s.Age != 40*time.Second || s.String() != "outstanding for 40s" || !s.Pending() {
		t.Fatalf("outstanding probe reported as %+v (%s)", s, s)
	}
	close(release)
	s = waitState(t, p)
	if s.State != ProbeOK {
		t.Fatalf("after release: %+v", s)
	}
	if s2 := p.Poll(); s2 != s {
		t.Fatalf("Poll is not idempotent: %+v then %+v", s, s2)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0]["model"] != "llama" || seen[0]["max_tokens"] != float64(2) || seen[0]["ignore_eos"] != true {
		t.Fatalf("probe bodies %v", seen)
	}
	if auth[0] != "Bearer k" {
		t.Fatalf("Authorization %q", auth[0])
	}
}

func TestCloseCancelsAProbeInFlight(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	p := NewCompletionProber(Target{URL: srv.URL}, time.Minute, nil)
	p.Start("")
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the probe in flight")
	}
	if p.Start("m") {
		t.Fatal("Start after Close started a probe")
	}
}
