package scenario_test

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

	"github.com/vigil-dev/vigil/alerts"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/watchdog"
)

// damage is a layer in front of the engine's /metrics that hurts the body
// the way real stacks do: a proxy or a timeout cutting it short (mid-line,
// or at a line boundary with the later families gone), a 500 every other
// scrape, a cache serving the same old copy.
type damage struct {
	e    *enginesim.Engine
	mode atomic.Value // string: "", "cut-mid-line", "cut-at-line", "500", "stale"
	n    atomic.Int64
	mu   sync.Mutex
	old  string // the stale copy
}

func (d *damage) real() string {
	rr := httptest.NewRecorder()
	d.e.Handler().ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rr.Body.String()
}

func (d *damage) set(mode string) {
	if mode == "stale" {
		d.mu.Lock()
		d.old = d.real()
		d.mu.Unlock()
	}
	d.mode.Store(mode)
}

func (d *damage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := d.n.Add(1)
	mode, _ := d.mode.Load().(string)
	body := d.real()
	switch {
	case mode == "cut-mid-line" && n%2 == 0:
		// Cut inside a sample line, with the length the proxy announced
		// for what it got: it parses up to a broken line.
		i := strings.Index(body, "vllm:generation_tokens_total{")
		body = body[:i+20]
	case mode == "cut-at-line" && n%3 == 0:
		// Cut between two lines, inside the iteration histogram: the
		// families after it are gone and its _count line too.
		i := strings.Index(body, "vllm:iteration_tokens_total_bucket{")
		j := strings.Index(body[i:], "\n")
		body = body[:i+j+1]
	case mode == "500" && n%2 == 0:
		http.Error(w, "upstream timed out", http.StatusInternalServerError)
		return
	case mode == "stale":
		d.mu.Lock()
		body = d.old
		d.mu.Unlock()
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	io.WriteString(w, body)
}

// damaged serves an engine whose /metrics goes through a damage layer.
func damaged(t *testing.T) (*enginesim.Engine, *damage, string) {
	t.Helper()
	d := &damage{}
	d.mode.Store("")
	e, url := serve(t, engineConfig(), func(w http.ResponseWriter, r *http.Request) { d.ServeHTTP(w, r) })
	d.e = e
	return e, d, url
}

func TestADamagedMetricsEndpointNeverHidesAHang(t *testing.T) {
	t.Parallel()
	// A stale /metrics is judged by the probes alone, so that engine is
	// loaded short of saturation: a probe that cannot complete for
	// hang_after reads as hung whatever the cause.
	for _, tc := range []struct {
		mode    string
		clients int
	}{{"cut-mid-line", 40}, {"cut-at-line", 40}, {"500", 40}, {"stale", 3}} {
		mode := tc.mode
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e, d, url := damaged(t)
			load(t, url, "", tc.clients, 500, 200)
			rec := watch(t, url, "", nil)
			time.Sleep(500 * time.Millisecond)
			d.set(mode)
			time.Sleep(1500 * time.Millisecond)
			hungAt := time.Now()
			e.Hang()
			bound := hangAfter + 4*interval
			v := waitHung(t, rec, hungAt, hangAfter+15*interval)
			took := v.At.Sub(hungAt)
			t.Logf("%s: hung after %s (bound %s): %s", mode, took.Round(time.Millisecond), bound, v.Reason)
			if took > bound {
				t.Fatalf("HUNG %s after the hang; want within hang_after + 4 intervals (%s)", took, bound)
			}
			time.Sleep(5 * interval)
			for _, v := range rec.all() {
				if v.At.Before(hungAt) && (v.State == watchdog.StateHung || v.State == watchdog.StateDown) {
					t.Fatalf("%s before the hang, while the engine served: %s", v.State, v.Reason)
				}
			}
			for _, later := range rec.all() {
				if later.At.After(v.At) && later.State != watchdog.StateHung {
					t.Fatalf("after HUNG: %s (%s)", later.State, later.Reason)
				}
			}
		})
	}
}

func TestADamagedMetricsEndpointOnAHealthyEngineIsQuiet(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"cut-at-line", "500", "cut-mid-line"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			_, d, url := damaged(t)
			load(t, url, "", 3, 200, 50) // under the 4 slots: healthy
			var n notices
			// The standing conditions (odd endpoints, metrics missing) go
			// to a real pager with the watchdog's unknown_after, as the
			// daemon wires them.
			pages := &pageLog{}
			pager, err := alerts.NewPager(pages, alerts.Options{Node: "node1", UnknownAfter: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			rec := watch(t, url, "", func(o *watchdog.Options) { o.Notice, o.Conditions = n.add, pager })
			time.Sleep(500 * time.Millisecond)
			from := time.Now()
			d.set(mode)
			time.Sleep(40 * interval)

			rec.never(t, watchdog.StateHung, watchdog.StateDown)
			changes := 0
			var prev watchdog.State
			for _, v := range rec.all() {
				if v.At.Before(from) {
					continue
				}
				if prev != "" && v.State != prev {
					changes++
				}
				prev = v.State
				if strings.Contains(v.Reason, "counters reset") {
					t.Errorf("%q says the counters reset on an engine that never restarted", v.Reason)
				}
			}
			if changes > 2 {
				t.Errorf("the verdict changed %d times in 40 cycles on a healthy engine; last: %s", changes, rec.last().Reason)
			}
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- pager.Run(ctx) }()
			flushCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := pager.Flush(flushCtx); err != nil {
				t.Fatal(err)
			}
			cancel()
			stop()
			<-done
			if got := append(n.of("metrics_missing"), n.of("engine_odd")...); len(got) > 0 {
				t.Errorf("standing conditions sent as notices, unfiltered: %q", got)
			}
			if got := pages.of("metrics_missing"); len(got) > 0 {
				t.Errorf("metrics-missing pages for a config that is fine: %q", got)
			}
			if got := pages.of("engine_odd"); len(got) > 1 {
				t.Errorf("%d odd pages, want at most one: %q", len(got), got)
			}
			t.Logf("%s: %d changes; last: %s", mode, changes, rec.last().Reason)
		})
	}
}

// pageLog is a notifier that keeps the pages, by topic.
type pageLog struct {
	mu    sync.Mutex
	pages []alerts.Message
}

func (l *pageLog) Notify(_ context.Context, m alerts.Message) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pages = append(l.pages, m)
	return false, nil
}

func (l *pageLog) of(topic string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, m := range l.pages {
		if m.Topic == topic {
			out = append(out, m.Text)
		}
	}
	return out
}
