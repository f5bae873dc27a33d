package balancer

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/testinfra"
)

func haproxyFor(t *testing.T, h *testinfra.HAProxy, server string) *HAProxy {
	t.Helper()
	d, err := NewHAProxy(configs.HAProxy{Socket: h.SocketURL(), Backend: h.Backend, Server: server, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestHAProxyRealDrainRampReady(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	n1, n2 := testinfra.SlowBackend(t, release), testinfra.SlowBackend(t, release)
	h := testinfra.StartHAProxyConfig(t, testinfra.HAProxyConfig{
		Backend:    "vllm",
		HealthPath: "/health",
		Servers: []testinfra.Server{
			{Name: "node1", Addr: n1.Listener.Addr().String(), Check: true},
			{Name: "node2", Addr: n2.Listener.Addr().String(), Check: true},
		},
	})
	h.WaitStatus(t, "node1", "UP", 5*time.Second)
	h.WaitStatus(t, "node2", "UP", 5*time.Second)
	ctx := context.Background()
	d := haproxyFor(t, h, "node1")

	st, err := d.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Known || st.Self.Server != "node1" || st.Self.Status != "UP" || st.Self.Drained || st.Self.WeightPercent() != 100 {
		t.Fatalf("before drain: self = %+v", st.Self)
	}
	if len(st.Others) != 1 || st.Others[0].Server != "node2" || st.Others[0].Out() {
		t.Fatalf("before drain: others = %+v", st.Others)
	}

	// A request in flight shows as a session on whichever server took it.
	go func() {
		resp, err := http.Get(h.URL() + "/slow")
		if err == nil {
			resp.Body.Close()
		}
	}()
	testinfra.WaitFor(t, 5*time.Second, "one session in flight", func() bool {
		st, err := d.State(ctx)
		return err == nil && st.Self.Sessions+st.Others[0].Sessions == 1
	})
	once.Do(func() { close(release) })

	if err := d.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if got := h.Stat(t)["node1"]["status"]; got != "DRAIN" {
		t.Fatalf("show stat status after drain = %q, want DRAIN", got)
	}
	st, _ = d.State(ctx)
	if !st.Self.Drained || st.Self.Status != "DRAIN" {
		t.Fatalf("State after drain: self = %+v", st.Self)
	}
	// node2 sees node1 drained: the pool lock.
	st2, err := haproxyFor(t, h, "node2").State(ctx)
	if err != nil || len(st2.Others) != 1 || !st2.Others[0].Drained {
		t.Fatalf("node2's view of node1 after the drain = %+v, %v", st2.Others, err)
	}

	for _, w := range []int{10, 50, 100} {
		if err := d.SetWeight(ctx, w); err != nil {
			t.Fatal(err)
		}
		st, _ = d.State(ctx)
		if st.Self.WeightPercent() != w {
			t.Fatalf("after SetWeight(%d): weight %d of %d", w, st.Self.Weight, st.Self.InitialWeight)
		}
		if got := h.Stat(t)["node1"]["uweight"]; got != strconv.Itoa(w) {
			t.Fatalf("show stat uweight after SetWeight(%d) = %q", w, got)
		}
	}
	if err := d.SetWeight(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if err := d.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.SetWeight(ctx, 100); err != nil {
		t.Fatal(err)
	}
	row := h.Stat(t)["node1"]
	if row["status"] != "UP" || row["weight"] != "100" {
		t.Fatalf("after ready: status %q weight %q, want UP at 100", row["status"], row["weight"])
	}
	st, _ = d.State(ctx)
	if st.Self.Drained || st.Self.WeightPercent() != 100 {
		t.Fatalf("State after ready: %+v", st.Self)
	}
}

// A drained server whose checks fail is reported drained, not merely
// down: the recovery's pool lock counts it (recoverer, poolLock).
func TestHAProxyRealDrainedServerThatIsDownStillCountsAsDrained(t *testing.T) {
	up := testinfra.SlowBackend(t, nil)
	// node2 points at a port nobody listens on: its checks fail.
	h := testinfra.StartHAProxyConfig(t, testinfra.HAProxyConfig{
		Backend: "pool",
		Servers: []testinfra.Server{
			{Name: "a", Addr: up.Listener.Addr().String(), Check: true},
			{Name: "b", Addr: testinfra.FreeAddr(t), Check: true},
		},
	})
	h.WaitStatus(t, "b", "DOWN", 5*time.Second)
	h.Command(t, "set server pool/b state drain")
	if got := h.Stat(t)["b"]["status"]; got != "DOWN" {
		t.Fatalf("show stat says %q for a drained server whose checks fail; the test assumes DOWN", got)
	}
	st, err := haproxyFor(t, h, "a").State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Others) != 1 || !st.Others[0].Drained {
		t.Fatalf("others = %+v, want b drained", st.Others)
	}
}

func TestHAProxyRealUnknownNamesAreErrorsThatNameThem(t *testing.T) {
	s := testinfra.SlowBackend(t, nil)
	h := testinfra.StartHAProxy(t, "vllm", testinfra.Server{Name: "node1", Addr: s.Listener.Addr().String()})
	ctx := context.Background()
	cases := []struct {
		name, backend, server, want string
	}{
		{"a server name HAProxy does not know is named in the error", "vllm", "node9", `server "node9" not found in backend "vllm"`},
		{"a backend name HAProxy does not know is named in the error", "nope", "node1", `backend "nope" not found`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := NewHAProxy(configs.HAProxy{Socket: h.Socket, Backend: c.backend, Server: c.server, Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			for op, f := range map[string]func() error{
				"drain":  func() error { return d.Drain(ctx) },
				"ready":  func() error { return d.Ready(ctx) },
				"weight": func() error { return d.SetWeight(ctx, 50) },
				"state":  func() error { _, err := d.State(ctx); return err },
			} {
				err := f()
				if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrNotFound) {
					t.Errorf("%s: err = %v, want one containing %s and wrapping ErrNotFound", op, err, c.want)
				}
			}
		})
	}
}

func TestHAProxyMissingSocketSaysSo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "admin.sock")
	d, err := NewHAProxy(configs.HAProxy{Socket: "unix://" + path, Backend: "vllm", Server: "node1", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = d.Drain(context.Background())
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "does not exist") ||
		!strings.Contains(err.Error(), "set server vllm/node1 state drain") {
		t.Fatalf("Drain with a missing socket = %v", err)
	}
	if _, err := d.State(context.Background()); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("State with a missing socket = %v", err)
	}
}

// fakeRuntimeAPI answers runtime API commands over TCP from a table.
func fakeRuntimeAPI(t *testing.T, answer func(cmd string) (string, bool)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				out, ok := answer(strings.TrimSpace(line))
				if !ok { // hang until the client gives up
					c.SetReadDeadline(time.Now().Add(10 * time.Second))
					c.Read(make([]byte, 1))
					return
				}
				c.Write([]byte(out))
			}()
		}
	}()
	return "tcp://" + l.Addr().String()
}

func TestHAProxyRuntimeAnswers(t *testing.T) {
	sock := fakeRuntimeAPI(t, func(cmd string) (string, bool) {
		switch {
		case strings.Contains(cmd, "state drain"):
			return "Permission denied\n\n", true
		case strings.Contains(cmd, "weight"):
			return "Backend is using a static LB algorithm and only accepts weights '0%' and '100%'.\n\n", true
		case strings.Contains(cmd, "state ready"):
			return "\n", true
		}
		return "", false
	})
	d, err := NewHAProxy(configs.HAProxy{Socket: sock, Backend: "vllm", Server: "node1", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.Drain(ctx); err == nil || !strings.Contains(err.Error(), "level admin") {
		t.Errorf("drain answered Permission denied: err = %v, want a hint about level admin", err)
	}
	if err := d.SetWeight(ctx, 10); err == nil || !strings.Contains(err.Error(), "static LB algorithm") {
		t.Errorf("weight refused: err = %v, want HAProxy's answer in it", err)
	}
	if err := d.Ready(ctx); err != nil {
		t.Errorf("ready answered with an empty line: err = %v", err)
	}
	// A command HAProxy never answers ends with the caller's context.
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := d.State(cctx); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("State against a silent socket = %v after %s, want the context's deadline promptly", err, time.Since(start))
	}
}

func TestHAProxySocketForms(t *testing.T) {
	cases := []struct {
		name, socket, network, address string
		bad                            bool
	}{
		{"a unix URL is a unix socket", "unix:///run/haproxy/admin.sock", "unix", "/run/haproxy/admin.sock", false},
		{"a bare path is a unix socket", "/run/haproxy/admin.sock", "unix", "/run/haproxy/admin.sock", false},
		{"a tcp URL is a TCP address", "tcp://127.0.0.1:9999", "tcp", "127.0.0.1:9999", false},
		{"anything else is refused", "http://127.0.0.1:9999", "", "", true},
		{"a URL with no path is refused", "unix://", "", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, err := NewHAProxy(configs.HAProxy{Socket: c.socket, Backend: "b", Server: "s"})
			if c.bad {
				if err == nil {
					t.Fatalf("NewHAProxy(%q) accepted it", c.socket)
				}
				return
			}
			if err != nil || h.network != c.network || h.address != c.address {
				t.Fatalf("NewHAProxy(%q) = %+v, %v", c.socket, h, err)
			}
		})
	}
}

func TestShowStatIsReadByHeaderName(t *testing.T) {
	// Columns in another order, and an extra one: a newer HAProxy.
	out := "# svname,pxname,status,new_col,weight,scur,qcur\n" +
		"node1,vllm,DRAIN,x,0,3,1\n" +
		"BACKEND,vllm,UP,x,100,3,1\n" +
		"node1,other,UP,x,100,9,9\n" +
		"node2,vllm,\"no check\",x,100,0,0\n\n"
	got, err := parseShowStat(out, "vllm")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Server != "node1" || got[0].Status != "DRAIN" || got[0].Sessions != 3 || got[0].Queued != 1 ||
		got[1].Server != "node2" || got[1].Status != "no check" || got[1].Weight != 100 {
		t.Fatalf("parseShowStat = %+v", got)
	}
	if _, err := parseShowStat("Unknown command\n", "vllm"); err == nil {
		t.Fatal("a non-CSV answer parsed")
	}
	if _, err := parseShowStat("# pxname,svname,status,qcur,weight\nvllm,node1,UP,0,1\n", "vllm"); err == nil || !strings.Contains(err.Error(), "scur") {
		t.Fatalf("a header without scur: err = %v", err)
	}
}

// A timeout keeps both causes in the error chain: the context's error for
// callers that test for it, and the socket's for the log.
func TestCtxErrKeepsBothCauses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cause := errors.New("read unix /run/haproxy/admin.sock: i/o timeout")
	err := ctxErr(ctx, cause)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
		t.Fatalf("%v: want both context.Canceled and the socket error in the chain", err)
	}
}
