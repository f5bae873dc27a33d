package admission

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

// TestMaxQueueZeroIsNoQueue: "max_queue: 0" in a config file loads as 0
// (not the default 1,024) and means no queue at all: with the cap taken, a
// request is answered 503 queue_full at once, with Retry-After, instead of
// waiting (the no-queue gateway of bench/goodput).
func TestMaxQueueZeroIsNoQueue(t *testing.T) {
	cfg, err := configs.Parse([]byte("engine:\n  url: http://127.0.0.1:8000\nadmission:\n  max_in_flight: 1\n  max_queue: 0\n"),
		time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Admission.MaxQueue != 0 {
		t.Fatalf("max_queue: 0 loaded as %d, want 0", cfg.Admission.MaxQueue)
	}
	release := make(chan struct{})
	defer close(release)
	eng := newFakeEngine(t, blockUntil(release))
	a := testConfig()
	a.MaxInFlight, a.MaxQueue = cfg.Admission.MaxInFlight, cfg.Admission.MaxQueue
	p := startProxy(t, a, eng.srv.URL)
	c := newClient(t)
	go call(context.Background(), c, p.url, completionBody)
	eventually(t, 2*time.Second, "the cap taken", func() bool { return p.l.Stats().InFlight == 1 })
	start := time.Now()
	got := call(context.Background(), c, p.url, completionBody)
	if waited := time.Since(start); waited > 500*time.Millisecond {
		t.Errorf("the request over the cap was answered after %v, want at once", waited)
	}
	checkRejection(t, got, http.StatusServiceUnavailable, ReasonQueueFull, true)
	if s := p.l.Stats(); s.Queued != 0 {
		t.Errorf("%d queued, want none", s.Queued)
	}
}
