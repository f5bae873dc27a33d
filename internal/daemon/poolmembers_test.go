package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/internal/testinfra/simengine"
	"github.com/vigil-dev/vigil/pool/coord"
	"github.com/vigil-dev/vigil/recoverer"
)

// fakePeer is another member's /status: a real HTTP server whose verdict
// the test sets, registered in etcd by the real registration code.
type fakePeer struct {
	srv   *httptest.Server
	mu    sync.Mutex
	node  string
	state string
	stop  context.CancelFunc
	done  chan struct{}
	sem   *coord.Semaphore
}

func startPeer(t *testing.T, endpoint, node, state string) *fakePeer {
	t.Helper()
	p := &fakePeer{node: node, state: state, done: make(chan struct{})}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		json.NewEncoder(w).Encode(map[string]any{"node": p.node, "verdict": map[string]any{"state": p.state}})
	}))
	t.Cleanup(p.srv.Close)
	var err error
	p.sem, err = coord.New(coord.Options{Endpoints: []string{endpoint}, Prefix: "/vigil/test-pool/", LeaseTTL: 2 * time.Second,
		Timeout: time.Second, Node: node})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	go func() { defer close(p.done); p.sem.Register(ctx, p.srv.URL+"/status", nil) }()
	t.Cleanup(p.kill)
	return p
}

func (p *fakePeer) set(state string) { p.mu.Lock(); p.state = state; p.mu.Unlock() }

// kill ends the peer as a SIGKILL would: its keep-alives stop, nothing
// revokes its lease.
func (p *fakePeer) kill() {
	p.sem.Close()
	p.stop()
	<-p.done
}

func poolDaemon(t *testing.T, endpoint string, minServing int) (*daemon, func(context.Context) error) {
	t.Helper()
	cfg := configs.Default()
	cfg.Node = "node1"
	cfg.Status.Listen = testinfra.FreeAddr(t)
	cfg.Pool.Coordination = "etcd"
	cfg.Pool.MinServing = minServing
	cfg.Pool.Timeout = time.Second
	cfg.Pool.Etcd.Endpoints = []string{endpoint}
	cfg.Pool.Etcd.LeaseTTL = 2 * time.Second
	cfg.Pool.Etcd.Timeout = time.Second
	cfg.Pool.Etcd.KeyPrefix = "/vigil/test-pool/"
	l := logrus.New()
	l.SetOutput(io.Discard)
	d := &daemon{log: logrus.NewEntry(l), cfg: &cfg}
	var ro recoverer.Options
	if err := d.wirePool(&cfg, &ro); err != nil {
		t.Fatal(err)
	}
	sup := newSupervisor(context.Background(), d.log)
	d.startPoolMembers(sup, &cfg)
	t.Cleanup(func() { sup.cancel(nil); d.closePool(); sup.Wait() })
	return d, ro.Floor
}

// eventually polls f until it returns "" (ok) or within passes.
func eventually(t *testing.T, within time.Duration, f func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", within, msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The min_serving floor counts the registered members' verdicts, with no
// static pool.peers: refused while too few serve, allowed once enough do,
// refused again when a member dies and its lease takes it out.
func TestFloorCountsRegisteredPeers(t *testing.T) {
	e := testinfra.StartEtcd(t)
	n2 := startPeer(t, e.Endpoint, "node2", "hung")
	startPeer(t, e.Endpoint, "node3", "healthy")
	d, floor := poolDaemon(t, e.Endpoint, 2)
	ctx := context.Background()

	eventually(t, 3*time.Second, func() string {
		err := floor(ctx)
		if err == nil || !strings.Contains(err.Error(), "only 1 other member(s) would keep serving, min_serving is 2 (not serving: node2 hung)") {
			return "floor: " + errString(err)
		}
		return ""
	})
	// This vigil registered itself and reads only the others.
	if ts := poolTargets(d.config(), d.members.get()); len(ts) != 2 || ts[0].node != "node2" || ts[1].node != "node3" {
		t.Errorf("targets %v, want node2 and node3 (not itself)", ts)
	}
	// Its own registration may reach the watched directory after the
	// peers' did (the floor above only needs the peers).
	eventually(t, 3*time.Second, func() string {
		if regs := d.members.get(); len(regs) != 3 || regs[0].Node != "node1" || regs[0].URL != "http://"+d.config().Status.Listen+"/status" {
			return fmt.Sprintf("directory %v, want node1 (this vigil, at its status listener), node2, node3", regs)
		}
		return ""
	})

	n2.set("saturated")
	if err := floor(ctx); err != nil {
		t.Fatalf("two registered peers serving, floor 2: %v", err)
	}

	n2.kill()
	eventually(t, 5*time.Second, func() string {
		err := floor(ctx)
		if err == nil || !strings.Contains(err.Error(), "only 1 other member(s) would keep serving") {
			return "floor after node2 died: " + errString(err)
		}
		if len(poolTargets(d.config(), d.members.get())) != 1 {
			return "node2 still in the directory"
		}
		return ""
	})
}

// A registered URL that answers as another node (a loopback URL read from
// the wrong host) does not count as that node serving.
func TestRegisteredPeerAnsweringAsAnotherNode(t *testing.T) {
	e := testinfra.StartEtcd(t)
	p := startPeer(t, e.Endpoint, "node2", "healthy")
	p.mu.Lock()
	p.node = "node9"
	p.mu.Unlock()
	d, floor := poolDaemon(t, e.Endpoint, 1)
	eventually(t, 3*time.Second, func() string {
		ms := d.fetchPeers(context.Background(), d.config())
		if len(ms) != 1 || ms[0].Node != "node2" || !strings.Contains(ms[0].Err, `answers as "node9" but registered as "node2"`) {
			return "members: " + toJSON(ms)
		}
		return ""
	})
	if err := floor(context.Background()); err == nil || !strings.Contains(err.Error(), "node2 unreachable") {
		t.Fatalf("floor: %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func toJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

// diagnose --config reads the pool (ReadPool) as the running vigil does:
// the members registered in etcd count without any pool.peers, and an
// etcd it cannot read is named instead of silently showing no pool.
func TestDiagnoseReadsThePoolRegisteredInEtcd(t *testing.T) {
	e := testinfra.StartEtcd(t)
	s := simengine.Start(t, nil)
	startPeer(t, e.Endpoint, "node2", "hung")
	path := filepath.Join(t.TempDir(), "vigil.yaml")
	yml := fmt.Sprintf(`node: node1
engine:
  url: %s
status:
  listen: %s
pool:
  coordination: etcd
  etcd:
    endpoints: [%s]
    key_prefix: /vigil/test-pool/
    lease_ttl: 2s
    timeout: 1s
`, s.URL(), testinfra.FreeAddr(t), e.Endpoint)
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(path, false)
	if err != nil {
		t.Fatal(err)
	}
	// The peer registers in the background.
	eventually(t, 5*time.Second, func() string {
		members, note := ReadPool(context.Background(), cfg)
		if len(members) != 1 || members[0].Node != "node2" || members[0].State != "hung" || note != "" {
			return fmt.Sprintf("the registered member is not read: %s, note %q", toJSON(members), note)
		}
		return ""
	})

	e.Stop()
	members, note := ReadPool(context.Background(), cfg)
	if !strings.Contains(note, "pool: members registered in etcd unknown: ") || !strings.Contains(note, e.Endpoint) || len(members) != 0 {
		t.Fatalf("with etcd down the members are not said to be unknown: %s, note %q", toJSON(members), note)
	}
}

// The turns count the peers drained by their vigil, registered or not
// registered any more (a member cut off from etcd mid-recovery: its
// registration expired with its lease). A vanished member that is no
// longer drained, or cannot be read, is forgotten.
func TestDrainedPeersCountsMembersWhoseRegistrationVanished(t *testing.T) {
	docs := map[string]string{
		"node2": `{"node":"node2","verdict":{"state":"healthy"},"recovery":{"drained":true}}`,
		"node3": `{"node":"node3","verdict":{"state":"loading"},"recovery":{"drained":true}}`,
		"node4": `{"node":"node4","verdict":{"state":"healthy"},"recovery":{"drained":false}}`,
		"node5": `{"node":"node5","verdict":{"state":"healthy"},"recovery":{"drained":false}}`,
	}
	reg := map[string]coord.Registered{}
	for node, doc := range docs {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, doc) }))
		t.Cleanup(srv.Close)
		reg[node] = coord.Registered{Node: node, URL: srv.URL + "/status"}
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	reg["node6"] = coord.Registered{Node: "node6", URL: dead.URL + "/status"}
	cfg := configs.Default()
	cfg.Node = "node1"
	cfg.Pool.Timeout = time.Second

	var dir coord.Directory
	dir.Set([]coord.Registered{reg["node2"], reg["node3"], reg["node4"], reg["node5"], reg["node6"]})
	// node3 (drained), node4 (not) and node6 (its vigil dead) vanish.
	dir.Set([]coord.Registered{reg["node2"], reg["node5"]})
	got := drainedPeers(t.Context(), &cfg, &dir)
	if strings.Join(got, ",") != "node2,node3" {
		t.Errorf("drained peers %v, want node2 (registered) and node3 (vanished, still drained)", got)
	}
	var gone []string
	for _, r := range dir.Gone() {
		gone = append(gone, r.Node)
	}
	if strings.Join(gone, ",") != "node3" {
		t.Errorf("still gone %v; want node3 kept, node4 (not drained) and node6 (unreadable) forgotten", gone)
	}
}
