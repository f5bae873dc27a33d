package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/testinfra"
)

func TestBadFlagsExit2(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
	}{
		{"unknown flag", []string{"-nope"}},
		{"bad scale", []string{"-scale", "0"}},
		{"bad duration", []string{"-load-time", "soon"}},
		{"zero seats", []string{"-max-num-seqs", "0"}},
		{"negative data parallel", []string{"--data-parallel", "-1"}},
		{"data parallel not a number", []string{"--data-parallel", "two"}},
		{"stray argument", []string{"extra"}},
		{"missing key file", []string{"-api-key-file", filepath.Join(dir, "missing")}},
		{"empty key file", []string{"-api-key-file", empty}},
		{"unknown metric names", []string{"-metrics", "tgi"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out testinfra.Buffer
			if code := runWith(context.Background(), tc.args, &out, nil); code != 2 {
				t.Fatalf("exit %d, want 2 (output %s)", code, out.String())
			}
		})
	}
}

func start(t *testing.T, ctx context.Context, args ...string) (chan int, *enginesim.Server, *testinfra.Buffer) {
	t.Helper()
	args = append([]string{"-listen", "127.0.0.1:0", "-control", "127.0.0.1:0", "-scale", "1000"}, args...)
	code := make(chan int, 1)
	srvc := make(chan *enginesim.Server, 1)
	out := &testinfra.Buffer{}
	go func() { code <- runWith(ctx, args, out, func(s *enginesim.Server) { srvc <- s }) }()
	select {
	case s := <-srvc:
		select {
		case <-s.Ready():
		case <-time.After(5 * time.Second):
			t.Fatal("not ready")
		}
		return code, s, out
	case c := <-code:
		t.Fatalf("exited %d early: %s", c, out.String())
	}
	return nil, nil, nil
}

func TestSignalExits0(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	code, s, out := start(t, ctx, "-load-time", "50s") // 50 ms wall
	resp, err := http.Get(s.URL() + "/v1/models")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("models: %v", err)
	}
	resp.Body.Close()
	// runWith logs "loaded" once it sees Ready too, so not necessarily
	// before this goroutine does.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(out.String(), "msg=loaded"); {
		if time.Now().After(deadline) {
			t.Fatalf("no loaded line in %q", out.String())
		}
		time.Sleep(time.Millisecond)
	}
	cancel() // what SIGTERM does through signal.NotifyContext
	if c := <-code; c != 0 {
		t.Fatalf("exit %d, want 0", c)
	}
}

func TestCrashExitsNonZero(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte("k1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, s, _ := start(t, context.Background(), "-api-key-file", key)
	resp, err := http.Get(s.URL() + "/v1/models")
	if err != nil || resp.StatusCode != 401 {
		t.Fatalf("models without key: %v %v", err, resp)
	}
	resp.Body.Close()
	resp, err = http.Post(s.ControlURL()+"/fault/crash", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	select {
	case c := <-code:
		if c == 0 {
			t.Fatal("crash exited 0")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no exit after crash")
	}
}

// --data-parallel 2 serves two ranks: each rank's series in the one
// /metrics, and a hang of rank 1 on the control port named as such.
func TestDataParallelFlag(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code, s, out := start(t, ctx, "--data-parallel", "2")
	if !strings.Contains(out.String(), "data_parallel=2") {
		t.Errorf("start-up line does not say data_parallel=2: %q", out.String())
	}
	resp, err := http.Get(s.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, rank := range []string{"0", "1"} {
		if !strings.Contains(string(body), `vllm:num_requests_running{engine="`+rank+`",model_name=`) {
			t.Errorf("/metrics has no running gauge for rank %s", rank)
		}
	}
	resp, err = http.Post(s.ControlURL()+"/fault/hang?rank=1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if st := s.Engine.Stats(); st.Fault != "hang-rank-1" || len(st.Ranks) != 2 {
		t.Fatalf("after hang of rank 1: fault %q, %d ranks", st.Fault, len(st.Ranks))
	}
	cancel()
	if c := <-code; c != 0 {
		t.Fatalf("exit %d, want 0", c)
	}
}

func TestMetricsFlagServesAnotherEnginesNames(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"sglang", "sglang:num_queue_reqs{"},
		{"llamacpp", "\nllamacpp:requests_deferred 0\n"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			code, s, _ := start(t, ctx, "-metrics", tc.set)
			resp, err := http.Get(s.URL() + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(body), tc.want) || strings.Contains(string(body), "vllm:") {
				t.Errorf("/metrics with -metrics %s lacks %q or has vllm: names:\n%s", tc.set, tc.want, body)
			}
			cancel()
			if c := <-code; c != 0 {
				t.Fatalf("exit %d, want 0", c)
			}
		})
	}
}
