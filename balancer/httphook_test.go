package balancer

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

func TestHTTPHooks(t *testing.T) {
	var mu sync.Mutex
	var got []string
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r.Method+" "+r.URL.Path+" "+string(body))
		w.WriteHeader(status)
		io.WriteString(w, "lb says no")
	}))
	defer srv.Close()
	cfg := configs.HTTPDrainer{
		Drain:   configs.HTTPHook{Method: "PUT", URL: srv.URL + "/drain?token=s3cret", Body: `{"server":"node1"}`},
		Ready:   configs.HTTPHook{Method: "POST", URL: srv.URL + "/ready?token=s3cret", Body: `{"server":"node1","weight":{{weight}}}`},
		Timeout: time.Second,
	}
	h := NewHTTPHooks(cfg, nil)
	ctx := context.Background()
	for _, step := range []func() error{
		func() error { return h.Drain(ctx) },
		func() error { return h.SetWeight(ctx, 10) },
		func() error { return h.Ready(ctx) },
		func() error { return h.SetWeight(ctx, 100) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		`PUT /drain {"server":"node1"}`,
		`POST /ready {"server":"node1","weight":10}`,
		`POST /ready {"server":"node1","weight":10}`,
		`POST /ready {"server":"node1","weight":100}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("hooks called:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if st, err := h.State(ctx); err != nil || st.Known {
		t.Fatalf("a hook's state cannot be read: %+v %v", st, err)
	}

	mu.Lock()
	status = http.StatusForbidden
	mu.Unlock()
	err := h.Drain(ctx)
	if err == nil || !strings.Contains(err.Error(), "status 403") || !strings.Contains(err.Error(), "lb says no") {
		t.Fatalf("a refused hook: %v", err)
	}
	if strings.Contains(err.Error(), "s3cret") || strings.Contains(h.String(), "s3cret") {
		t.Fatalf("a hook URL's token leaked: %v / %s", err, h)
	}
	srv.Close()
	if err := h.Drain(ctx); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("an unreachable hook: %v (must fail without the token)", err)
	}
}

func TestHTTPHooksWithoutAWeightCallReadyOnlyWhenReady(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	defer srv.Close()
	h := NewHTTPHooks(configs.HTTPDrainer{Ready: configs.HTTPHook{URL: srv.URL}}, srv.Client())
	for _, w := range []int{10, 50, 100} {
		if err := h.SetWeight(context.Background(), w); err != nil {
			t.Fatal(err)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("a ready hook without {{weight}} was called %d times during the ramp", n)
	}
	if err := h.Ready(context.Background()); err != nil || calls.Load() != 1 {
		t.Fatalf("Ready: %v, calls %d", err, calls.Load())
	}
}
