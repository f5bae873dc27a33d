package balancer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/testinfra"
)

func startAgent(t *testing.T, expect int, within time.Duration) *Agent {
	t.Helper()
	a, err := NewAgent(configs.Agent{Listen: "127.0.0.1:0", ExpectPolls: expect, ExpectWithin: within}, nil)
	if err != nil {
		t.Fatal(err)
	}
	testinfra.Serve(t, a)
	return a
}

// poll is one agent check as HAProxy makes it: connect, send the
// agent-send line if any, read the answer.
func poll(t *testing.T, addr, send string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if send != "" {
		if _, err := io.WriteString(conn, send+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	b := make([]byte, 64)
	n, _ := conn.Read(b)
	return string(b[:n])
}

func TestAgentAnswersTheRampAndTheDrain(t *testing.T) {
	t.Parallel()
	a := startAgent(t, 0, 0)
	ctx := context.Background()
	steps := []struct {
		name string
		do   func() error
		want string
	}{
		{"a fresh vigil is up at full weight", func() error { return nil }, "up ready 100%\n"},
		{"a drained host says drain, never maint", func() error { return a.Drain(ctx) }, "drain\n"},
		{"still drain while held (the weight changes nothing)", func() error { return a.SetWeight(ctx, 10) }, "drain\n"},
		{"restored, it is up at the ramp's first weight", func() error { return a.Ready(ctx) }, "up ready 10%\n"},
		{"the ramp goes on", func() error { return a.SetWeight(ctx, 50) }, "up ready 50%\n"},
		{"and ends at 100%", func() error { return a.SetWeight(ctx, 100) }, "up ready 100%\n"},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := poll(t, a.Addr(), ""); got != s.want {
			t.Errorf("%s: answered %q, want %q", s.name, got, s.want)
		}
	}
	if err := a.SetWeight(ctx, 101); err == nil {
		t.Error("a weight of 101% was accepted")
	}
}

func TestAgentDrainWaitsForEachExpectedPoller(t *testing.T) {
	t.Parallel()
	a := startAgent(t, 2, 2*time.Second)
	poll(t, a.Addr(), "lb-a") // before the drain: does not count
	done := make(chan error, 1)
	go func() { done <- a.Drain(context.Background()) }()
	testinfra.WaitFor(t, 5*time.Second, "the drain to be answered", func() bool { return poll(t, a.Addr(), "lb-a") == "drain\n" })
	select {
	case err := <-done:
		t.Fatalf("the drain returned after one of two pollers: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if got := poll(t, a.Addr(), "lb-b"); got != "drain\n" {
		t.Fatalf("lb-b was answered %q", got)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the drain did not return once both pollers had heard it")
	}
	if got := a.Pollers(); strings.Join(got, ",") != "lb-a,lb-b" {
		t.Errorf("pollers = %q", got)
	}
}

func TestAgentDrainThatAPollerNeverHearsFailsNamingThoseThatDid(t *testing.T) {
	t.Parallel()
	a := startAgent(t, 2, 300*time.Millisecond)
	go func() {
		time.Sleep(50 * time.Millisecond)
		poll(t, a.Addr(), "lb-a")
	}()
	err := a.Drain(context.Background())
	want := "agent: drain: 1 of 2 expected pollers (load_balancer.agent.expect_polls) were told within 300ms; told: lb-a"
	if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

func TestAgentPollerWithoutAgentSendIsKnownByItsAddress(t *testing.T) {
	t.Parallel()
	a := startAgent(t, 1, time.Second)
	done := make(chan error, 1)
	go func() { done <- a.Drain(context.Background()) }()
	testinfra.WaitFor(t, 5*time.Second, "drain answered", func() bool { return poll(t, a.Addr(), "") == "drain\n" })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := a.Pollers(); len(got) != 1 || got[0] != "127.0.0.1" {
		t.Errorf("pollers = %q", got)
	}
}

// agentHAProxy is a real HAProxy whose node1 is checked by vigil's agent
// (and node2 by a plain check); send names this HAProxy to the agent.
func agentHAProxy(t *testing.T, agentAddr, node1, node2, send string) *testinfra.HAProxy {
	t.Helper()
	_, agentPort, _ := net.SplitHostPort(agentAddr)
	return testinfra.StartHAProxyText(t, "vllm", func(socket, frontend string) (string, error) {
		return fmt.Sprintf(testinfra.HAProxyHead+`    balance roundrobin
    server node1 %s weight 100 check inter 200ms agent-check agent-port %s agent-inter 200ms agent-send "%s\n"
    server node2 %s weight 100 check inter 200ms
`, socket, frontend, node1, agentPort, send, node2), nil
	})
}

func waitWeight(t *testing.T, h *testinfra.HAProxy, server, want string) {
	t.Helper()
	testinfra.WaitFor(t, 5*time.Second, h.Dir+" "+server+" weight "+want, func() bool { return h.Stat(t)[server]["weight"] == want })
}

// Two real HAProxy processes poll the same agent: a drain drains node1 in
// both (and returns once both have heard it), the ramp's weights appear
// in both, restore brings both back.
func TestAgentRealHAProxyPairDrainsRampsAndRestoresTogether(t *testing.T) {
	a := startAgent(t, 2, 5*time.Second)
	n1, n2 := testinfra.SlowBackend(t, nil), testinfra.SlowBackend(t, nil)
	pair := []*testinfra.HAProxy{
		agentHAProxy(t, a.Addr(), n1.Listener.Addr().String(), n2.Listener.Addr().String(), "haproxy-a"),
		agentHAProxy(t, a.Addr(), n1.Listener.Addr().String(), n2.Listener.Addr().String(), "haproxy-b"),
	}
	for _, h := range pair {
		h.WaitStatus(t, "node1", "UP", 5*time.Second)
		h.WaitStatus(t, "node2", "UP", 5*time.Second)
	}
	ctx := context.Background()
	if err := a.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	for _, h := range pair {
		h.WaitStatus(t, "node1", "DRAIN (agent)", 5*time.Second) // HAProxy names who drained it
		if got := h.Stat(t)["node2"]["status"]; got != "UP" {
			t.Errorf("node2 is %q beside the drained node1", got)
		}
	}
	if got := strings.Join(a.Pollers(), ","); got != "haproxy-a,haproxy-b" {
		t.Errorf("pollers = %q", got)
	}
	if err := a.SetWeight(ctx, 25); err != nil {
		t.Fatal(err)
	}
	if err := a.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	for _, h := range pair {
		h.WaitStatus(t, "node1", "UP", 5*time.Second)
		waitWeight(t, h, "node1", "25")
	}
	if err := a.SetWeight(ctx, 100); err != nil {
		t.Fatal(err)
	}
	for _, h := range pair {
		waitWeight(t, h, "node1", "100")
		if got := h.Stat(t)["node1"]["status"]; got != "UP" {
			t.Errorf("node1 is %q after the ramp", got)
		}
	}
}

// HAProxy keeps what the agent last said when the agent stops answering:
// a vigil restart moves no traffic, and a drained host stays drained.
func TestAgentRealHAProxyKeepsTheDrainWhenTheAgentStops(t *testing.T) {
	a, err := NewAgent(configs.Agent{Listen: "127.0.0.1:0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx) }()
	n1, n2 := testinfra.SlowBackend(t, nil), testinfra.SlowBackend(t, nil)
	h := agentHAProxy(t, a.Addr(), n1.Listener.Addr().String(), n2.Listener.Addr().String(), "haproxy-a")
	h.WaitStatus(t, "node1", "UP", 5*time.Second)
	if err := a.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	h.WaitStatus(t, "node1", "DRAIN (agent)", 5*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	a.Close()
	time.Sleep(600 * time.Millisecond) // three agent-inter periods with nobody answering
	if got := h.Stat(t)["node1"]["status"]; got != "DRAIN (agent)" {
		t.Fatalf("node1 is %q once the agent stopped, want it still drained", got)
	}
}

// A vigil restarted with the host drained in its journal answers "drain"
// from the first poll: a poll before the resumed recovery runs must not
// put a hung engine back in rotation.
func TestPolledBalancersStartDrainedWhenTheJournalSaysSo(t *testing.T) {
	t.Parallel()
	a, err := NewAgent(configs.Agent{Listen: "127.0.0.1:0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.StartDrained()
	testinfra.Serve(t, a)
	if got := poll(t, a.Addr(), ""); got != "drain\n" {
		t.Errorf("agent's first answer %q, want drain", got)
	}
	h, err := NewHealthCheck(configs.HealthCheck{Listen: "127.0.0.1:0", Path: "/ready"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.StartDrained()
	testinfra.Serve(t, h)
	if code, body := get(t, "GET", "http://"+h.Addr()+"/ready"); code != 503 || !strings.HasPrefix(body, "draining:") {
		t.Errorf("health check's first answer %d %q, want 503 draining", code, body)
	}
}
