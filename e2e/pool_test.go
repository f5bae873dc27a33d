package e2e_test

// A pool of vigils coordinating through a real etcd (Debian's etcd-server,
// started by testinfra): each vigil registers its /status there, they take
// turns at recovering their engines behind one real HAProxy, a killed
// holder's turn expires with its lease, a stopped etcd stops drains, and
// the min_serving floor counts the registered members.
//
// The engines are containers of the shared dockerd, as in the other tests,
// loading in 1 s of wall time (a 20 s load at scale 20) so that two
// recoveries in a row fit the test's budget.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/pool/coord"
)

const (
	poolPrefix = "/vigil/e2e-pool/"
	// poolLease is pool.etcd.lease_ttl: etcd's minimum, so a dead
	// holder's turn and registration go within seconds.
	poolLease = 2 * time.Second
	// poolEngineLoad is the engines' load time in engine time (1 s wall).
	poolEngineLoad = "20s"
)

// poolRig is one etcd, one HAProxy backend with a server per node, and an
// engine container per node.
type poolRig struct {
	d     *testinfra.Dockerd
	etcd  *testinfra.Etcd
	h     *testinfra.HAProxy
	nodes []string
	engs  map[string]*engine
}

// newPoolRig starts the engines "<name>-<node>" concurrently, then HAProxy
// in front of them, and waits until every server is UP.
func newPoolRig(t *testing.T, name string, nodes ...string) *poolRig {
	t.Helper()
	r := &poolRig{d: testinfra.StartDockerd(t), etcd: testinfra.StartEtcd(t), nodes: nodes, engs: map[string]*engine{}}
	importEngineImage(t, r.d)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var servers []testinfra.Server
	for _, n := range nodes {
		e := &engine{d: r.d, name: name + "-" + n, api: testinfra.FreeAddr(t), control: testinfra.FreeAddr(t)}
		r.engs[n] = e
		servers = append(servers, testinfra.Server{Name: n, Addr: e.api, Check: true})
		// The containers start one by one (RunContainer may t.Fatal, so
		// it stays on the test goroutine); their load times overlap.
		r.d.RunContainer(t, testinfra.Container{Name: e.name, Image: engineImage, Cmd: []string{"/vllm-sim",
			"-listen", e.api, "-control", e.control, "-scale", fmt.Sprint(engineScale), "-load-time", poolEngineLoad}})
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := serving(e.api, 30*time.Second)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("engine %s: %v", e.name, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	r.h = testinfra.StartHAProxyConfig(t, testinfra.HAProxyConfig{Backend: backend, HealthPath: "/health", Servers: servers})
	for _, n := range nodes {
		r.h.WaitStatus(t, n, "UP", 20*time.Second)
	}
	return r
}

// poolVigilConfig is node's vigil: its own server of the shared backend,
// its own container, and pool coordination through the rig's etcd with
// no static peers (the members find each other by registering).
func (r *poolRig) vigilConfig(t *testing.T, node string) vigilConfig {
	return vigilConfig{
		Node: node, EngineURL: "http://" + r.engs[node].api, HAProxySocket: r.h.SocketURL(), Server: node,
		DockerHost: r.d.Host, Container: r.engs[node].name, DrainTimeoutHung: time.Second,
		StateFile:    filepath.Join(t.TempDir(), "state.json"),
		StatusListen: testinfra.FreeAddr(t), AdmissionListen: testinfra.FreeAddr(t),
	}
}

// startPoolVigil runs vigil on cfg plus a pool section for etcd; extra is
// appended inside that section (e.g. "  min_serving: 1\n").
func (r *poolRig) startVigil(t *testing.T, cfg vigilConfig, extra string) *vigil {
	t.Helper()
	return startVigilYAML(t, cfg, cfg.yaml()+fmt.Sprintf(`pool:
  timeout: 1s
  coordination: etcd
  etcd:
    endpoints: [%s]
    key_prefix: %s
    lease_ttl: %s
    timeout: 1s
%s`, r.etcd.Endpoint, poolPrefix, poolLease, extra))
}

// peer is one member of /status's pool view.
type peer struct {
	Node    string `json:"node"`
	URL     string `json:"url"`
	State   string `json:"state"`
	Drained bool   `json:"drained"`
	Err     string `json:"error"`
}

// poolView reads vigil's /status pool view: "node2 healthy, node3 hung".
func (v *vigil) poolView() (string, error) {
	var doc struct {
		Pool []peer `json:"pool"`
	}
	if err := testinfra.GetJSON(statusClient, v.StatusURL+"/status", &doc); err != nil {
		return "", err
	}
	var parts []string
	for _, p := range doc.Pool {
		s := p.Node + " " + p.State
		if p.Err != "" {
			s = p.Node + " unreachable"
		}
		if p.Drained {
			s += " drained"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", "), nil
}

// waitPoolView waits until the pool view satisfies ok.
func (v *vigil) waitPoolView(t *testing.T, within time.Duration, what string, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	var err error
	for time.Now().Before(deadline) {
		if last, err = v.poolView(); err == nil && ok(last) {
			return last
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s's pool view never showed %s within %s: last %q (%v)", v.cfg.Node, what, within, last, err)
	return ""
}

// poolObs is every server's HAProxy status at one moment, from one
// "show stat".
type poolObs struct {
	At     time.Time
	Status map[string]string // server → status
	Weight map[string]string
}

func (o poolObs) key() string {
	var b strings.Builder
	for _, n := range slices.Sorted(maps.Keys(o.Status)) {
		fmt.Fprintf(&b, "%s=%s/%s ", n, o.Status[n], o.Weight[n])
	}
	return b.String()
}

// out lists the servers out of rotation: drained, in maintenance or down
// (a restarting engine fails its health checks).
func (o poolObs) out() []string {
	var res []string
	for n, st := range o.Status {
		if !strings.HasPrefix(st, "UP") {
			res = append(res, n)
		}
	}
	slices.Sort(res)
	return res
}

func (o poolObs) when() time.Time { return o.At }

func (o poolObs) String() string { return o.At.Format("15:04:05.000") + " " + o.key() }

// poolMonitor samples HAProxy every 25 ms and keeps each change.
type poolMonitor struct{ *recorder[poolObs] }

func startPoolMonitor(t *testing.T, h *testinfra.HAProxy) *poolMonitor {
	t.Helper()
	return &poolMonitor{record(t, 25*time.Millisecond, "HAProxy", func() (poolObs, bool) {
		o := poolObs{At: time.Now(), Status: map[string]string{}, Weight: map[string]string{}}
		stat, err := h.Servers()
		if err != nil {
			return o, false
		}
		for n, row := range stat {
			o.Status[n], o.Weight[n] = row["status"], row["weight"]
		}
		return o, true
	})}
}

func drained(node string) func(poolObs) bool {
	return func(o poolObs) bool { return strings.HasPrefix(o.Status[node], "DRAIN") }
}

func allUpFull(nodes ...string) func(poolObs) bool {
	return func(o poolObs) bool {
		for _, n := range nodes {
			if o.Status[n] != "UP" || o.Weight[n] != "100" {
				return false
			}
		}
		return true
	}
}

// holders lists the turns held in the rig's etcd, read by the real
// client as a vigil would.
func (r *poolRig) holders(t *testing.T) []coord.Holder {
	t.Helper()
	s, err := coord.New(coord.Options{Endpoints: []string{r.etcd.Endpoint}, Prefix: poolPrefix, LeaseTTL: poolLease, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hs, err := s.Holders(context.Background())
	if err != nil {
		t.Fatalf("read the turns in etcd: %v", err)
	}
	return hs
}

// waitPastGrace waits out every engine's startup grace.
func (r *poolRig) waitPastGrace(t *testing.T) {
	t.Helper()
	for _, n := range r.nodes {
		r.engs[n].waitPastGrace(t)
	}
}

// hangAll hangs every engine at once.
func (r *poolRig) hangAll(t *testing.T) time.Time {
	t.Helper()
	at := time.Now()
	errs := make(chan error, len(r.nodes))
	for _, n := range r.nodes {
		go func() {
			resp, err := (&http.Client{Timeout: 5 * time.Second}).Post("http://"+r.engs[n].control+"/fault/hang", "", nil)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("hang %s: HTTP %d", n, resp.StatusCode)
				}
			}
			errs <- err
		}()
	}
	for range r.nodes {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return at
}

// journalTurn reads the pool turn in vigil's journal ("" when none).
// waitTurnsGiven waits up to within for every recovery turn in etcd to be
// given back and returns those still held. A recovery shows "resolved" in
// /status a moment before it gives its turn back, so reading the turns at
// once races with the release.
func (r *poolRig) waitTurnsGiven(t *testing.T, within time.Duration) []coord.Holder {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		hs := r.holders(t)
		if len(hs) == 0 || time.Now().After(deadline) {
			return hs
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (v *vigil) journalTurn(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(v.cfg.StateFile)
	if err != nil {
		t.Fatalf("state file: %v", err)
	}
	var s struct {
		Recovery struct {
			Turn *struct {
				Key string `json:"key"`
			} `json:"turn"`
		} `json:"recovery"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("state file %s: %v", v.cfg.StateFile, err)
	}
	if s.Recovery.Turn == nil {
		return ""
	}
	return s.Recovery.Turn.Key
}

// Two vigils, no static peers: they find each other through etcd. Both
// engines hang in the same instant; exactly one member is out of rotation
// at any moment, the other says it waits for the pool's turn and then
// recovers; each engine is restarted once and no turn is left in etcd.
func TestPoolTwoHangsRecoverOneAtATime(t *testing.T) {
	skipShort(t)
	t.Parallel()
	r := newPoolRig(t, "e2e-pool-turns", "node1", "node2")
	m := startPoolMonitor(t, r.h)
	v1 := r.startVigil(t, r.vigilConfig(t, "node1"), "")
	v2 := r.startVigil(t, r.vigilConfig(t, "node2"), "")
	v1.waitPoolView(t, 10*time.Second, "node2 healthy (registered in etcd)", func(s string) bool { return s == "node2 healthy" })
	v2.waitPoolView(t, 10*time.Second, "node1 healthy (registered in etcd)", func(s string) bool { return s == "node1 healthy" })
	r.waitPastGrace(t)

	hangAt := r.hangAll(t)
	first := m.waitFor(t, 15*time.Second, "a server DRAIN", hangAt, func(o poolObs) bool { return len(o.out()) > 0 })
	holder, waiter, vw := "node1", "node2", v2
	if first.out()[0] == "node2" {
		holder, waiter, vw = "node2", "node1", v1
	}
	second := m.waitFor(t, 30*time.Second, waiter+" DRAIN after "+holder+"'s recovery", first.At, drained(waiter))
	end := m.waitFor(t, 30*time.Second, "both servers UP at 100%", second.At, allUpFull("node1", "node2"))
	t.Logf("hang at %s; %s drained after %s; %s drained after %s; both back after %s",
		hangAt.Format("15:04:05.000"), holder, first.At.Sub(hangAt).Round(time.Millisecond), waiter,
		second.At.Sub(hangAt).Round(time.Millisecond), end.At.Sub(hangAt).Round(time.Millisecond))

	if both := m.all(hangAt, func(o poolObs) bool { return len(o.out()) > 1 }); len(both) > 0 {
		t.Errorf("both members out of rotation at once: %s %s", both[0].At.Format("15:04:05.000"), both[0].key())
	}
	if back := m.all(first.At, allUpFull(holder)); len(back) == 0 || back[0].At.After(second.At) {
		t.Errorf("%s drained before %s was back in rotation", waiter, holder)
	}
	if !strings.Contains(vw.Logs.String(), "waiting for the pool's turn to recover: "+holder) {
		t.Errorf("%s's vigil never said it waited for %s's turn", waiter, holder)
	}
	for _, n := range r.nodes {
		if got := r.engs[n].starts(t, hangAt, time.Now()); got != 1 {
			t.Errorf("%s's engine started %d times since the hang, want exactly 1", n, got)
		}
	}
	for _, v := range []*vigil{v1, v2} {
		doc := v.waitStatus(t, 5*time.Second, "the recovery resolved", func(d statusDoc) bool { return d.Recovery.Step == "resolved" })
		if doc.Recovery.Drained || doc.Recovery.RestartsInWindow != 1 {
			t.Errorf("%s: drained %t, %d restarts; want back in rotation after one restart", v.cfg.Node, doc.Recovery.Drained, doc.Recovery.RestartsInWindow)
		}
	}
	if hs := r.waitTurnsGiven(t, 3*time.Second); len(hs) != 0 {
		t.Errorf("turns left in etcd after both recoveries: %v", hs)
	}
}

// The holder's vigil is killed with SIGKILL between its drain and its
// restore. Its turn expires with its lease (and its registration with
// it); the other member then takes the turn and recovers. The killed
// vigil, started again, finds its journal, asks for the turn again behind
// the other, finishes its own recovery and gives the turn back.
func TestPoolHolderKilledMidRecoveryLetsTheOtherProceed(t *testing.T) {
	skipShort(t)
	t.Parallel()
	r := newPoolRig(t, "e2e-pool-kill", "node1", "node2")
	m := startPoolMonitor(t, r.h)
	vs := map[string]*vigil{}
	for _, n := range r.nodes {
		cfg := r.vigilConfig(t, n)
		cfg.DrainTimeoutHung = 3 * time.Second // the kill lands inside the drain wait
		vs[n] = r.startVigil(t, cfg, "")
	}
	vs["node1"].waitPoolView(t, 10*time.Second, "node2 registered", func(s string) bool { return s == "node2 healthy" })
	vs["node2"].waitPoolView(t, 10*time.Second, "node1 registered", func(s string) bool { return s == "node1 healthy" })
	// Requests through HAProxy stay in flight on a hung engine, so the
	// drain wait lasts its whole drain_timeout_hung: the kill's window.
	startLoad(t, r.h.URL(), 4, 50, time.Minute)
	r.waitPastGrace(t)

	hangAt := r.hangAll(t)
	first := m.waitFor(t, 15*time.Second, "a server DRAIN", hangAt, func(o poolObs) bool { return len(o.out()) > 0 })
	holder, other := first.out()[0], "node1"
	if holder == "node1" {
		other = "node2"
	}
	vh, vo := vs[holder], vs[other]
	vh.Kill(t)
	killedAt := time.Now()
	if step, isDrained := vh.journal(t); (step != "drain" && step != "drain_wait") || !isDrained {
		t.Fatalf("%s's journal when killed: step %q, drained %t; want drain or drain_wait, drained (the kill came too late)", holder, step, isDrained)
	}
	turn := vh.journalTurn(t)
	if turn == "" || !strings.HasPrefix(turn, poolPrefix+"recovery/") {
		t.Fatalf("%s's journal holds no pool turn (%q) though it drained", holder, turn)
	}

	// The dead holder's turn expires with its lease; the other drains.
	next := m.waitFor(t, poolLease+8*time.Second, other+" DRAIN after the holder's death", killedAt, drained(other))
	waited := next.At.Sub(killedAt)
	t.Logf("%s drained after %s; vigil killed; %s drained %s later", holder, first.At.Sub(hangAt).Round(time.Millisecond), other, waited.Round(time.Millisecond))
	if waited < poolLease/2 {
		t.Errorf("%s drained %s after the holder died, before the holder's lease (%s) could expire", other, waited, poolLease)
	}
	vo.waitPoolView(t, poolLease+3*time.Second, holder+" gone from the pool (its registration expired)", func(s string) bool { return s == "" })
	if hs := r.holders(t); len(hs) != 1 || hs[0].Node != other {
		t.Errorf("turns in etcd while %s recovers: %v, want %s's alone", other, hs, other)
	}

	// The killed vigil comes back while the other recovers.
	vh.Start(t)
	end := m.waitFor(t, 40*time.Second, "both servers UP at 100%", next.At, allUpFull("node1", "node2"))
	t.Logf("both back %s after the hang", end.At.Sub(hangAt).Round(time.Millisecond))
	logs := vh.Logs.String()
	if !strings.Contains(logs, "resuming an unfinished recovery from the journal") {
		t.Errorf("the restarted %s vigil did not resume its journal", holder)
	}
	if !strings.Contains(logs, "the journaled pool turn is gone") || !strings.Contains(logs, "took the pool's turn again to finish the recovery") {
		t.Errorf("the restarted %s vigil did not find its turn expired and take a new one", holder)
	}
	for _, n := range r.nodes {
		if got := r.engs[n].starts(t, hangAt, time.Now()); got != 1 {
			t.Errorf("%s's engine started %d times since the hang, want exactly 1", n, got)
		}
	}
	for _, v := range []*vigil{vh, vo} {
		v.waitStatus(t, 5*time.Second, "the recovery resolved", func(d statusDoc) bool { return d.Recovery.Step == "resolved" && !d.Recovery.Drained })
	}
	if hs := r.waitTurnsGiven(t, 3*time.Second); len(hs) != 0 {
		t.Errorf("turns left in etcd at the end: %v", hs)
	}
	if turn := vh.journalTurn(t); turn != "" {
		t.Errorf("%s's journal still holds turn %s", holder, turn)
	}
	vo.waitPoolView(t, 5*time.Second, holder+" registered again", func(s string) bool { return s == holder+" healthy" })
}

// etcd stops: the hung engine is not drained (vigil will not drain on its
// own say-so), the page says why, and vigil keeps watching.
func TestPoolEtcdStoppedNoDrainAndAPageSayingWhy(t *testing.T) {
	skipShort(t)
	t.Parallel()
	r := newPoolRig(t, "e2e-pool-noetcd", "node1")
	m := startPoolMonitor(t, r.h)
	v := r.startVigil(t, r.vigilConfig(t, "node1"), "")
	dir, err := coord.New(coord.Options{Endpoints: []string{r.etcd.Endpoint}, Prefix: poolPrefix, LeaseTTL: poolLease, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		members, _, err := dir.Members(context.Background())
		if err == nil && len(members) == 1 && members[0].Node == "node1" && members[0].URL == v.StatusURL+"/status" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node1 never registered in etcd: %v, %v", members, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	r.etcd.Stop()
	r.waitPastGrace(t)
	hangAt := r.hangAll(t)
	v.waitStatus(t, 15*time.Second, "a guard refusal", func(d statusDoc) bool { return d.Recovery.Step == "guard_refused" })
	time.Sleep(2 * time.Second) // nothing may change while it keeps watching
	logs := v.Logs.String()
	if want := "cannot take the pool's turn (etcd unavailable at " + r.etcd.Endpoint; !strings.Contains(logs, want) {
		t.Errorf("no page saying %q", want)
	}
	if !strings.Contains(logs, "not draining on this vigil's own say-so") {
		t.Errorf("the page does not say vigil will not drain on its own")
	}
	if !strings.Contains(logs, "not registered in the pool's etcd directory") {
		t.Errorf("vigil did not say it lost its registration")
	}
	if out := m.all(hangAt, func(o poolObs) bool { return len(o.out()) > 0 }); len(out) > 0 {
		t.Errorf("the server left rotation with etcd stopped: %s %s", out[0].At.Format("15:04:05.000"), out[0].key())
	}
	if n := r.engs["node1"].starts(t, hangAt, time.Now()); n != 0 {
		t.Errorf("engine started %d times with etcd stopped, want 0", n)
	}
	doc := v.mustStatus(t)
	if doc.Verdict.State != "hung" || doc.Recovery.Drained || doc.Incident == nil || !doc.Incident.Resolved.IsZero() {
		t.Errorf("vigil after the refusal: verdict %q, drained %t, incident %+v; want still watching a hung engine, undrained, incident open",
			doc.Verdict.State, doc.Recovery.Drained, doc.Incident)
	}
}

// statusPeer is a pool member that is not a vigil of this test: a /status
// document registered in etcd by the real registration code. Two of them
// stand for the pool's two unhealthy members (two more engines, vigils
// and containers would double the test's cost for no part of the claim:
// the floor reads the members' /status, whatever runs behind it).
type statusPeer struct {
	srv  *httptest.Server
	sem  *coord.Semaphore
	stop context.CancelFunc
	done chan struct{}
}

func startStatusPeer(t *testing.T, etcd, node, doc string) *statusPeer {
	t.Helper()
	p := &statusPeer{done: make(chan struct{})}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, doc)
	}))
	var err error
	p.sem, err = coord.New(coord.Options{Endpoints: []string{etcd}, Prefix: poolPrefix, LeaseTTL: poolLease, Timeout: time.Second, Node: node})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	go func() { defer close(p.done); p.sem.Register(ctx, p.srv.URL+"/status", nil) }()
	t.Cleanup(func() { p.stop(); <-p.done; p.sem.Close(); p.srv.Close() })
	return p
}

// min_serving 1 in a pool of three whose other two members are already
// unhealthy (one hung by its /status, one drained by its vigil): the third
// member's hang pages why and waits, and nothing is drained.
func TestPoolMinServingRefusesWithTwoOfThreeUnhealthy(t *testing.T) {
	skipShort(t)
	t.Parallel()
	r := newPoolRig(t, "e2e-pool-floor", "node1")
	startStatusPeer(t, r.etcd.Endpoint, "node2", `{"node":"node2","verdict":{"state":"hung"},"recovery":{"drained":false}}`)
	startStatusPeer(t, r.etcd.Endpoint, "node3", `{"node":"node3","verdict":{"state":"healthy"},"recovery":{"drained":true}}`)
	m := startPoolMonitor(t, r.h)
	v := r.startVigil(t, r.vigilConfig(t, "node1"), "  min_serving: 1\n")
	v.waitPoolView(t, 10*time.Second, "both registered peers", func(s string) bool { return s == "node2 hung, node3 healthy drained" })
	r.waitPastGrace(t)

	hangAt := r.hangAll(t)
	v.waitStatus(t, 15*time.Second, "a guard refusal", func(d statusDoc) bool { return d.Recovery.Step == "guard_refused" })
	time.Sleep(2 * time.Second) // it waits: nothing may change
	want := "not draining: below the capacity floor: only 0 other member(s) would keep serving, min_serving is 1 (not serving: node2 hung, node3 drained)"
	if !strings.Contains(v.Logs.String(), want) {
		t.Errorf("no page saying %q", want)
	}
	if out := m.all(hangAt, func(o poolObs) bool { return len(o.out()) > 0 }); len(out) > 0 {
		t.Errorf("the server left rotation below the floor: %s %s", out[0].At.Format("15:04:05.000"), out[0].key())
	}
	if n := r.engs["node1"].starts(t, hangAt, time.Now()); n != 0 {
		t.Errorf("engine started %d times below the floor, want 0", n)
	}
	if doc := v.mustStatus(t); doc.Verdict.State != "hung" || doc.Recovery.Drained {
		t.Errorf("vigil: verdict %q, drained %t; want hung and waiting undrained", doc.Verdict.State, doc.Recovery.Drained)
	}
}
