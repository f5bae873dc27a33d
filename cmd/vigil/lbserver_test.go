package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

func TestRunServesTheHealthCheckEndpoint(t *testing.T) {
	s := startEngine(t, nil)
	addr := freeAddr(t)
	td := startDaemon(t, daemonConfig(t, s.URL())+"load_balancer:\n  kind: healthcheck\n  healthcheck:\n    listen: "+addr+"\n")
	resp, err := http.Get("http://" + addr + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ready" {
		t.Fatalf("GET /ready = %d %q", resp.StatusCode, body)
	}
	td.stop()
	if _, err := http.Get("http://" + addr + "/ready"); err == nil {
		t.Fatal("the endpoint still answers after vigil stopped")
	}
}

func TestRunAnswersTheAgentCheck(t *testing.T) {
	s := startEngine(t, nil)
	addr := freeAddr(t)
	startDaemon(t, daemonConfig(t, s.URL())+"load_balancer:\n  kind: agent\n  agent:\n    listen: "+addr+"\n")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b, _ := io.ReadAll(conn)
	if string(b) != "up ready 100%\n" {
		t.Fatalf("agent answered %q", b)
	}
}
