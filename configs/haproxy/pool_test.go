package haproxy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs/haproxy"
	"github.com/vigil-dev/vigil/internal/testinfra"
)

// The shipped file is valid HAProxy as it stands.
func TestShippedFileChecks(t *testing.T) {
	bin := testinfra.LookPath(t, "HAPROXY", testinfra.RequireHAProxyEnv, "haproxy")
	out, err := exec.Command(bin, "-c", "-f", filepath.Join(".", "pool.cfg")).CombinedOutput()
	if err != nil {
		t.Fatalf("haproxy -c -f pool.cfg: %v\n%s", err, out)
	}
}

func TestRenderNeedsEverything(t *testing.T) {
	for _, o := range []haproxy.Options{
		{Bind: "127.0.0.1:1", Servers: []haproxy.Server{{"a", "127.0.0.1:2"}}},
		{Socket: "/s", Servers: []haproxy.Server{{"a", "127.0.0.1:2"}}},
		{Socket: "/s", Bind: "127.0.0.1:1"},
	} {
		if _, err := haproxy.Render(o); err == nil {
			t.Errorf("Render(%+v) = nil error", o)
		}
	}
}

// pool starts three named backends (each answers with its name) behind a
// real HAProxy running the shipped pool.cfg.
func pool(t *testing.T, roundRobin bool) *testinfra.HAProxy {
	t.Helper()
	var servers []haproxy.Server
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("node%d", i)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("X-Node", name)
			w.WriteHeader(http.StatusOK)
		}))
		t.Cleanup(srv.Close)
		servers = append(servers, haproxy.Server{Name: name, Addr: strings.TrimPrefix(srv.URL, "http://")})
	}
	h := testinfra.StartHAProxyText(t, haproxy.Backend, func(socket, frontend string) (string, error) {
		return haproxy.Render(haproxy.Options{Socket: socket, Bind: frontend, Servers: servers, RoundRobin: roundRobin, CheckInterval: "200ms"})
	})
	for _, s := range servers {
		h.WaitStatus(t, s.Name, "UP", 5*time.Second)
	}
	return h
}

// call sends one completion through HAProxy, keyed when key != "", and
// returns the node that answered.
func call(t *testing.T, c *http.Client, h *testinfra.HAProxy, key string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.URL()+"/v1/completions", strings.NewReader(`{"prompt":"hi","max_tokens":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST via haproxy: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	node := resp.Header.Get("X-Node")
	if resp.StatusCode != http.StatusOK || node == "" {
		t.Fatalf("POST via haproxy: HTTP %d from %q", resp.StatusCode, node)
	}
	return node
}

// placement sends every key `tries` times, each try on a fresh connection
// and on a shared keep-alive one, and fails unless each key always lands
// on one node.
func placement(t *testing.T, h *testinfra.HAProxy, keys []string, tries int) map[string]string {
	t.Helper()
	shared := &http.Client{}
	got := map[string]string{}
	for try := range tries {
		for _, k := range keys {
			c := shared
			if try%2 == 1 {
				c = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			}
			node := call(t, c, h, k)
			if prev, ok := got[k]; ok && prev != node {
				t.Fatalf("key %s went to %s, then to %s", k, prev, node)
			}
			got[k] = node
		}
	}
	return got
}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("call-%04d-%x", i, i*7919)
	}
	return out
}

func count(m map[string]string) map[string]int {
	c := map[string]int{}
	for _, n := range m {
		c[n]++
	}
	return c
}

func TestKeyAffineRouting(t *testing.T) {
	h := pool(t, false)
	ks := keys(90)
	before := placement(t, h, ks, 4)
	per := count(before)
	for _, n := range []string{"node1", "node2", "node3"} {
		if per[n] < 10 {
			t.Fatalf("keys per node %v: %s got fewer than 10 of 90", per, n)
		}
	}

	// Calls without a key still spread over every member.
	seen := map[string]int{}
	for range 30 {
		seen[call(t, &http.Client{}, h, "")]++
	}
	if len(seen) != 3 {
		t.Fatalf("unkeyed calls reached %v, want all three nodes", seen)
	}

	// Drain node2 the way vigil does: only node2's keys move.
	h.Command(t, "set server "+haproxy.Backend+"/node2 state drain")
	h.WaitStatus(t, "node2", "DRAIN", 2*time.Second)
	during := placement(t, h, ks, 2)
	moved := 0
	for _, k := range ks {
		switch {
		case during[k] == "node2":
			t.Fatalf("key %s reached drained node2", k)
		case before[k] != "node2" && during[k] != before[k]:
			t.Errorf("key %s moved %s → %s though its node was not drained", k, before[k], during[k])
		case before[k] == "node2":
			moved++
		}
	}
	if moved != per["node2"] {
		t.Fatalf("%d keys moved, want node2's %d", moved, per["node2"])
	}

	// Restored, every key goes home.
	h.Command(t, "set server "+haproxy.Backend+"/node2 state ready")
	h.WaitStatus(t, "node2", "UP", 2*time.Second)
	after := placement(t, h, ks, 2)
	for _, k := range ks {
		if after[k] != before[k] {
			t.Errorf("key %s on %s after restore, was %s", k, after[k], before[k])
		}
	}
}

// The round-robin rendering (the benchmark's control) really scatters a
// key's retries: the comparison would be meaningless otherwise.
func TestRoundRobinScattersRetries(t *testing.T) {
	h := pool(t, true)
	c := &http.Client{}
	nodes := map[string]bool{}
	for range 6 {
		nodes[call(t, c, h, "one-key")] = true
	}
	if len(nodes) < 2 {
		t.Fatalf("round-robin sent six tries of one key to %v only", nodes)
	}
}
