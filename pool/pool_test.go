package pool

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func peer(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + "/status"
}

func serve(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(body))
	}
}

func TestFetchReadsEveryPeerAndNeverFailsAsAWhole(t *testing.T) {
	saturated := peer(t, serve(`{
		"node": "node2", "version": "1.2.3",
		"verdict": {"state": "saturated", "reason": "99 waiting", "evidence": {"waiting": 40, "running": 12, "tokens_per_second": 2340}},
		"recovery": {"drained": false, "step": ""},
		"limiter": {"in_flight": 32}
	}`))
	drained := peer(t, serve(`{"node":"node3","verdict":{"state":"hung","evidence":{"waiting":7,"running":3}},"recovery":{"drained":true}}`))
	slow := peer(t, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // far beyond the timeout
	})
	garbage := peer(t, serve(`<html>502 Bad Gateway</html>`))
	broken := peer(t, func(w http.ResponseWriter, r *http.Request) { http.Error(w, "oops", http.StatusInternalServerError) })
	gone := httptest.NewServer(http.NotFoundHandler())
	goneURL := gone.URL + "/status"
	gone.Close()

	peers := []string{saturated, drained, slow, garbage, broken, goneURL}
	start := time.Now()
	got := Fetch(context.Background(), peers, 300*time.Millisecond)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Fetch took %v; a slow peer must not hold up the view", took)
	}
	if len(got) != len(peers) {
		t.Fatalf("Fetch returned %d members for %d peers", len(got), len(peers))
	}
	cases := []struct {
		name    string
		m       Member
		node    string
		state   string
		waiting float64
		running float64
		drained bool
		err     string
	}{
		{"a saturated peer reports its queue", got[0], "node2", "saturated", 40, 12, false, ""},
		{"a peer vigil drained says so", got[1], "node3", "hung", 7, 3, true, ""},
		{"a slow peer times out on its own", got[2], hostOf(slow), "", 0, 0, false, "timeout after 300ms"},
		{"a peer answering garbage is unreadable, not fatal", got[3], hostOf(garbage), "", 0, 0, false, "not a vigil status document"},
		{"a peer answering 500 is an error", got[4], hostOf(broken), "", 0, 0, false, "HTTP 500"},
		{"a peer that refuses connections is unreachable", got[5], hostOf(goneURL), "", 0, 0, false, "refused"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.m
			if m.URL != peers[i] || m.Node != tc.node || m.State != tc.state || m.Waiting != tc.waiting ||
				m.Running != tc.running || m.Drained != tc.drained {
				t.Fatalf("member = %+v", m)
			}
			if tc.err == "" && m.Err != "" || !strings.Contains(m.Err, tc.err) {
				t.Fatalf("member error = %q, want it to mention %q", m.Err, tc.err)
			}
		})
	}
}

func TestFetchWithNoPeersIsEmpty(t *testing.T) {
	if got := Fetch(context.Background(), nil, time.Second); len(got) != 0 {
		t.Fatalf("Fetch(nil) = %v", got)
	}
}

func TestSummarize(t *testing.T) {
	self := Member{Node: "node1", State: "saturated", Waiting: 40}
	cases := []struct {
		name  string
		peers []Member
		want  string
	}{
		{"a pool with one member in trouble and one gone",
			[]Member{{Node: "node2", State: "healthy", Waiting: 2}, {Node: "node3", Err: "timeout after 3s"}},
			"pool: 3 members — node1 SATURATED 40 waiting, node2 healthy 2 waiting, node3 unreachable"},
		{"a drained peer is called out",
			[]Member{{Node: "node2", State: "hung", Waiting: 7, Drained: true}},
			"pool: 2 members — node1 SATURATED 40 waiting, node2 HUNG 7 waiting (drained by vigil)"},
		{"a lone vigil is a pool of one", nil, "pool: 1 member — node1 SATURATED 40 waiting"},
		{"a peer with no verdict yet is unknown",
			[]Member{{Node: "node2"}},
			"pool: 2 members — node1 SATURATED 40 waiting, node2 unknown 0 waiting"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Summarize(self, tc.peers); got != tc.want {
				t.Fatalf("Summarize =\n  %s\nwant\n  %s", got, tc.want)
			}
		})
	}
}

func TestAnotherDrained(t *testing.T) {
	cases := []struct {
		name   string
		peers  []Member
		want   string
		wantOK bool
	}{
		{"nobody drained lets recovery proceed", []Member{{Node: "node2"}, {Node: "node3"}}, "", false},
		{"a drained peer holds the lock", []Member{{Node: "node2"}, {Node: "node3", Drained: true}}, "node3", true},
		{"two drained peers: everyone names the same one",
			[]Member{{Node: "node9", Drained: true}, {Node: "node4", Drained: true}}, "node4", true},
		{"an unreachable peer is not known to be drained",
			[]Member{{Node: "node2", Drained: true, Err: "refused"}}, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := AnotherDrained(tc.peers)
			if got != tc.want || ok != tc.wantOK {
				t.Fatalf("AnotherDrained = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// Where a peer's limiter is reached, from its admission.listen and the
// /status URL it was read from.
func TestProxyURL(t *testing.T) {
	for _, tc := range []struct{ status, listen, want string }{
		{"http://10.0.0.8:9108/status", "0.0.0.0:8001", "http://10.0.0.8:8001"},
		{"http://10.0.0.8:9108/status", ":8001", "http://10.0.0.8:8001"},
		{"http://10.0.0.8:9108/status", "10.0.1.8:8001", "http://10.0.1.8:8001"},
		{"http://10.0.0.8:9108/status", "127.0.0.1:8001", ""}, // loopback on another host: unreachable
		{"http://127.0.0.1:9108/status", "127.0.0.1:8001", "http://127.0.0.1:8001"},
		{"http://[fd00::8]:9108/status", "[::]:8001", "http://[fd00::8]:8001"},
		{"http://10.0.0.8:9108/status", "", ""}, // its limiter is off
	} {
		if got := proxyURL(tc.status, tc.listen); got != tc.want {
			t.Errorf("proxyURL(%q, %q) = %q, want %q", tc.status, tc.listen, got, tc.want)
		}
	}
}
