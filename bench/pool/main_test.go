package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/admission"
	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/configs/haproxy"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/simclient"
	"github.com/vigil-dev/vigil/internal/testinfra"
)

// directives returns the config's lines (trimmed) whose first word is
// one of words, in order.
func directives(cfg string, words ...string) []string {
	var out []string
	for line := range strings.Lines(cfg) {
		f := strings.Fields(line)
		if len(f) > 0 && slices.Contains(words, f[0]) {
			out = append(out, strings.Join(f, " "))
		}
	}
	return out
}

// The key-affine arm measures what ships: its balance and hash lines are
// the shipped file's, and the round-robin arm differs from it only there.
func TestPoolConfigRoutesAsShipped(t *testing.T) {
	addrs := []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}
	shipped := directives(haproxy.PoolCfg, "balance", "hash-type")
	if !slices.Equal(shipped, []string{"balance hdr(Idempotency-Key)", "hash-type consistent"}) {
		t.Fatalf("shipped pool.cfg routes by %q; this benchmark's control and labels assume the key hash", shipped)
	}
	key, err := poolConfig(keyAffine, "/tmp/s.sock", "127.0.0.1:7000", addrs)
	if err != nil {
		t.Fatal(err)
	}
	rr, err := poolConfig(roundRobin, "/tmp/s.sock", "127.0.0.1:7000", addrs)
	if err != nil {
		t.Fatal(err)
	}
	if got := directives(key, "balance", "hash-type"); !slices.Equal(got, shipped) {
		t.Errorf("key-affine routes by %q, shipped file by %q", got, shipped)
	}
	if got := directives(rr, "balance", "hash-type"); !slices.Equal(got, []string{"balance roundrobin"}) {
		t.Errorf("round-robin routes by %q", got)
	}
	wantServers := []string{"server node1 127.0.0.1:7001", "server node2 127.0.0.1:7002", "server node3 127.0.0.1:7003"}
	for name, cfg := range map[string]string{"key-affine": key, "round-robin": rr} {
		if got := directives(cfg, "server"); !slices.Equal(got, wantServers) {
			t.Errorf("%s servers %q, want %q", name, got, wantServers)
		}
		if got := directives(cfg, "bind"); !slices.Equal(got, []string{"bind 127.0.0.1:7000"}) {
			t.Errorf("%s binds %q", name, got)
		}
		// Everything else (timeouts, retries, health checks) is the
		// shipped file's.
		for _, w := range []string{"timeout", "retries", "option", "default-server", "http-check"} {
			if got, want := directives(cfg, w), directives(haproxy.PoolCfg, w); !slices.Equal(got, want) {
				t.Errorf("%s %s lines %q, shipped %q", name, w, got, want)
			}
		}
	}
	if _, err := poolConfig(direct, "/tmp/s.sock", "127.0.0.1:7000", addrs); err == nil {
		t.Error("direct arm rendered a HAProxy config")
	}
}

func TestParseArms(t *testing.T) {
	got, err := parseArms("key-affine,single")
	if err != nil || len(got) != 2 || got[0].routing != keyAffine || got[1].routing != direct {
		t.Fatalf("parseArms = %+v, %v", got, err)
	}
	if _, err := parseArms("single,least-conn"); err == nil || !strings.Contains(err.Error(), `"least-conn"`) {
		t.Errorf("unknown arm: error %v, want one naming it", err)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-nodes", "1"}, {"-scale", "0"}, {"-hold", "10s"}, {"-arms", "nginx"}, {"-limiter-time", "x"}, {"extra"}} {
		if code := run(args, io.Discard, io.Discard); code != 2 {
			t.Errorf("run(%q) = %d, want 2", args, code)
		}
	}
}

func TestMeasureSumsThePool(t *testing.T) {
	const c, hold = 2.0, 100 * time.Second // 200 executions per node = 1.0 x C
	eng := func(received, completed uint64) enginesim.Stats {
		return enginesim.Stats{Received: received, Completed: completed}
	}
	r := armResult{
		nodes: 3,
		calls: []simclient.Result{
			{Start: 130 * time.Second, Attempts: 1, Delivered: true, DeliveredAt: 140 * time.Second}, // pulse, on time
			{Start: 300 * time.Second, Attempts: 3, Delivered: true, DeliveredAt: 500 * time.Second}, // hold, late
			{Start: 310 * time.Second, Attempts: 1, Delivered: true, DeliveredAt: 320 * time.Second}, // hold, on time
		},
		phase: []int{harness.PhasePulse, harness.PhaseHold, harness.PhaseHold},
		hold0: snapshot{engines: []enginesim.Stats{eng(10, 5), eng(20, 5), eng(30, 5)}},
		hold1: snapshot{engines: []enginesim.Stats{eng(10+100, 5+100), eng(20+200, 5+150), eng(30+300, 5+200)}},
		end: snapshot{limiters: []admission.Stats{
			{Retries: 10, CoalescedAttached: 2, CoalescedStored: 1, KeyedRetries: 4, KeyedRetriesFound: 3},
			{Retries: 20, CoalescedAttached: 3, KeyedRetries: 6, KeyedRetriesFound: 3},
			{Retries: 10},
		}},
		servers: map[string]map[string]string{"node1": {"chkdown": "1"}, "node2": {"chkdown": "0"}, "node3": {"chkdown": "2"}},
	}
	f := measure(r, c, hold)
	for _, x := range []struct {
		name      string
		got, want float64
	}{
		{"hold created (x pool C)", f.holdCreated, 600.0 / 200 / 3},
		{"hold completed (x pool C)", f.holdCompleted, 450.0 / 200 / 3},
		{"busiest node created (x C)", f.busiestCreated, 300.0 / 200},
		{"retries attached", f.attachedShare(), 6.0 / 40},
		{"keyed retries found", f.foundShare(), 6.0 / 10},
		{"hold on time", f.HoldOnTime, 0.5},
		{"server downs", float64(f.serverDowns), 3},
		{"client retries", float64(f.Retries), 2},
	} {
		if d := x.got - x.want; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s = %v, want %v", x.name, x.got, x.want)
		}
	}
	if got := (figures{}).foundShare(); got != 0 {
		t.Errorf("found share with no retries = %v, want 0", got)
	}
}

// A short end-to-end run through a real HAProxy running the shipped
// configuration (a one-minute hold at scale 200: the figures mean little,
// so this checks the plumbing, not them; configs/haproxy tests the key
// placement itself): every node serves, HAProxy keeps every server up,
// calls are delivered and keyed retries reach their call memory.
func TestSmokeKeyAffine(t *testing.T) {
	testinfra.Alone(t)
	testinfra.Long(t, "an end-to-end run of three nodes behind HAProxy")
	testinfra.LookPath(t, "HAPROXY", testinfra.RequireHAProxyEnv, "haproxy")
	c, _ := harness.PaperCapacity(200)
	o := options{scale: 200, seed: 1, nodes: 3, hold: time.Minute, limiterTime: harness.TimeClock}
	r, err := runArm(t.Context(), o, arms[2], c)
	if err != nil {
		t.Fatal(err)
	}
	if r.arm.routing != keyAffine || len(r.end.limiters) != 3 || len(r.servers) != 3 {
		t.Fatalf("ran %s on %d nodes, HAProxy reports %d servers", r.arm.name, len(r.end.limiters), len(r.servers))
	}
	for i, s := range r.end.limiters {
		if s.Executions == 0 {
			t.Errorf("%s executed nothing", nodeName(i))
		}
		if st := r.servers[nodeName(i)]; st["status"] != "UP" || st["stot"] == "0" {
			t.Errorf("haproxy %s: status %s, %s sessions", nodeName(i), st["status"], st["stot"])
		}
	}
	if r.f.serverDowns != 0 {
		t.Errorf("HAProxy marked servers down %d times", r.f.serverDowns)
	}
	if r.f.HoldDelivered == 0 || r.f.HoldCalls == 0 {
		t.Errorf("hold: %d calls, %.2f delivered", r.f.HoldCalls, r.f.HoldDelivered)
	}
	if r.f.keyedFound == 0 {
		t.Errorf("no keyed retry found its execution (%d had one to find)", r.f.keyedRetries)
	}
	if t.Failed() {
		printResults(t.Output(), []armResult{r}, c)
	}
}
