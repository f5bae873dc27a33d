package status

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/actions"
	"github.com/vigil-dev/vigil/admission"
	"github.com/vigil-dev/vigil/pool"
	"github.com/vigil-dev/vigil/watchdog"
)

// hungSnapshot is a node whose engine hung with six requests running, the
// restart refused for now, a limiter holding a queue and one peer drained.
func hungSnapshot() Snapshot {
	at := t0
	return Snapshot{
		Node: "gpu-node-07", Version: "1.2.3", At: at,
		Verdict: watchdog.Verdict{
			State: watchdog.StateHung, At: at.Add(-2 * time.Second),
			Reason: "HUNG: no progress for 3m05s with 12 waiting, 6 running; probe outstanding for 3m; will drain and restart",
			Evidence: watchdog.Evidence{
				Waiting: 12, Running: 6, SinceProgress: 185 * time.Second, LongestGap: 185 * time.Second,
				HeartbeatDeltas: map[string]float64{"vllm:request_success_total": 0, "vllm:iteration_tokens_total_count": 0},
				Models:          "200 in 4ms", Health: "200 in 2ms", Probe: "outstanding for 3m0s",
			},
		},
		Incident: &watchdog.Incident{ID: "gpu-node-07-20250601T115657Z-3", Opened: at.Add(-3 * time.Minute),
			State: watchdog.StateHung, Peak: watchdog.StateHung, Changed: at.Add(-3 * time.Minute)},
		Recovery: actions.Snapshot{Active: true, Step: "drain", StepAt: at.Add(-10 * time.Second), Drained: true,
			RestartsInWindow: 1, Budget: 3, BudgetWindow: "6h0m0s", LastError: "haproxy: show stat: 3 sessions still open"},
		Limiter: admission.Stats{Calls: 41200, Executions: 40100, Admitted: 39800, InFlight: 6, Cap: 24,
			FirstTokenLimit: 2, AwaitingFirstToken: 1, QueueDepth: 9, OldestQueued: 14 * time.Second, Recovering: true,
			Rejected: map[string]uint64{admission.ReasonRecovering: 312, admission.ReasonQueueFull: 0}},
		Pool: []pool.Member{{Node: "gpu-node-08", State: "saturated", Waiting: 31, Running: 64},
			{Node: "gpu-node-09", Err: "dial tcp 10.0.0.9:9108: connection refused"}},
	}
}

func TestRenderPage(t *testing.T) {
	healthy := Snapshot{Node: "gpu-node-01", At: t0,
		Verdict: watchdog.Verdict{State: watchdog.StateHealthy, At: t0, Reason: "HEALTHY: 2,340 tok/s"}}
	saturated := Snapshot{Node: "gpu-node-02", At: t0, DryRun: true,
		Verdict: watchdog.Verdict{State: watchdog.StateSaturated, At: t0,
			Reason:   "SATURATED: 99 waiting, 2,340 tok/s; not restarting",
			Evidence: watchdog.Evidence{Waiting: 99, Running: 256, TokensPerSec: 2340, ProgressDelta: 41200, DrainEstimate: 6 * time.Minute}},
		Incident: &watchdog.Incident{ID: "inc-sat", Opened: t0.Add(-90 * time.Second), State: watchdog.StateSaturated, Peak: watchdog.StateSaturated}}
	hostile := Snapshot{Node: `<script>alert(1)</script>`, At: t0,
		Verdict: watchdog.Verdict{State: watchdog.StateUnknown, Reason: `UNKNOWN: metrics "<b>broken</b>"`}}

	for _, tc := range []struct {
		name    string
		snap    Snapshot
		want    []string
		notWant []string
	}{
		{"hung", hungSnapshot(), []string{
			`<title>HUNG · vigil · gpu-node-07</title>`, `class="state bad">HUNG<`, "no progress for 3m05s",
			"12 / 6", "3m05s", "vllm:request_success_total", "outstanding for 3m0s",
			"gpu-node-07-20250601T115657Z-3", "3m00s ago as HUNG", "drain (10s ago)", "1 of 3 in 6h0m0s",
			"3 sessions still open", "6 / 24 (fixed, recovering)", "streams awaiting first token / limit</th><td class=\"n\">1 / 2", "9 waiting, oldest 14s", "41,200 / 40,100",
			"rejected: recovering", "312", "gpu-node-08", "SATURATED", "31 / 64", "unreachable: dial tcp 10.0.0.9:9108",
		}, []string{"rejected: queue_full", "DRY RUN"}},
		{"saturated, dry run", saturated, []string{
			`class="state busy">SATURATED<`, "DRY RUN", "2,340 tok/s (+41,200 tokens)", "99 / 256",
			"queue drains in", "6m00s", "inc-sat", "1m30s ago as SATURATED",
			"The limiter is off", "No peers configured",
		}, nil},
		{"healthy, nothing open", healthy, []string{
			`class="state ok">HEALTHY<`, "open incident</th><td class=\"none\">none",
		}, []string{"Overrides (they expire)"}},
		{"hostile text is escaped", hostile, []string{
			"&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;b&gt;broken&lt;/b&gt;", `class="state unknown"`,
		}, []string{"<script>", "<b>broken"}},
		{"no verdict yet", Snapshot{Node: "n", At: t0}, []string{"No verdict yet"}, nil},
		{"a pool with no other member found", Snapshot{Node: "n", At: t0, Pool: []struct{}{}},
			[]string{"No other member found: none listed in pool.peers, none registered in etcd."},
			[]string{"No peers configured"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := renderPage(tc.snap)
			if err != nil {
				t.Fatal(err)
			}
			page := string(out)
			for _, w := range append(tc.want, `<meta http-equiv="refresh" content="10">`) {
				if !strings.Contains(page, w) {
					t.Errorf("page lacks %q", w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(page, w) {
					t.Errorf("page has %q", w)
				}
			}
			if strings.Contains(strings.ToLower(page), "<script") {
				t.Error("the page must work without script")
			}
		})
	}
}

func TestPageRoute(t *testing.T) {
	s := New(Options{Snapshot: hungSnapshot})
	for _, tc := range []struct {
		path        string
		code        int
		contentType string
	}{
		{"/", http.StatusOK, "text/html; charset=utf-8"},
		{"/status", http.StatusOK, "application/json"},
		{"/nothing-here", http.StatusNotFound, ""},
	} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
		if rec.Code != tc.code {
			t.Errorf("GET %s: %d, want %d", tc.path, rec.Code, tc.code)
		}
		if tc.contentType != "" && rec.Header().Get("Content-Type") != tc.contentType {
			t.Errorf("GET %s: Content-Type %q, want %q", tc.path, rec.Header().Get("Content-Type"), tc.contentType)
		}
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q: the page loads nothing from elsewhere", csp)
	}
}

// TestPageScreenshot renders the page served by a real status server in
// headless Chromium and checks the screenshot shows it: a PNG of the
// window's size, not blank, with the red of the HUNG badge in it. Without
// chromium the test skips, except under CI=true, where test.sh installs
// it and a skip would hide a broken page.
func TestPageScreenshot(t *testing.T) {
	chromium := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			chromium = p
			break
		}
	}
	if chromium == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed (apt-get install chromium); CI=true requires this test to run")
		}
		t.Skip("chromium not installed")
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := New(Options{Listen: ln.Addr().String(), Snapshot: hungSnapshot})
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})

	dir := t.TempDir()
	shot := filepath.Join(dir, "page.png")
	runCtx, stop := context.WithTimeout(context.Background(), 60*time.Second)
	defer stop()
	const width, height = 1280, 900
	cmd := exec.CommandContext(runCtx, chromium, "--headless", "--no-sandbox", "--disable-gpu",
		"--no-first-run", "--disable-extensions", "--hide-scrollbars", "--user-data-dir="+filepath.Join(dir, "profile"),
		"--window-size=1280,900", "--screenshot="+shot, "http://"+ln.Addr().String()+"/")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, out.String())
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v\n%s", err, out.String())
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != width || b.Dy() != height {
		t.Errorf("screenshot is %dx%d, want %dx%d", b.Dx(), b.Dy(), width, height)
	}
	colours, badge := census(img)
	// A blank or error page has a handful of colours; the status page's
	// text, panels and badges give hundreds (anti-aliased glyphs).
	if colours < 50 {
		t.Errorf("screenshot has %d distinct colours: blank?", colours)
	}
	// The HUNG badge (#c62828) must be on screen: the verdict is the
	// first thing an operator looks for.
	if badge < 500 {
		t.Errorf("screenshot has %d pixels of the HUNG badge's red, want a visible badge", badge)
	}
	if dst := os.Getenv("VIGIL_SCREENSHOT_OUT"); dst != "" {
		copyFile(t, shot, dst)
	}
}

// census counts distinct colours and pixels of the "bad" badge colour.
func census(img image.Image) (colours, badge int) {
	seen := map[uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			r, g, bl = r>>8, g>>8, bl>>8
			seen[r<<16|g<<8|bl] = true
			if near(r, 0xc6) && near(g, 0x28) && near(bl, 0x28) {
				badge++
			}
		}
	}
	return len(seen), badge
}

func near(a, b uint32) bool { return a+3 >= b && a <= b+3 }

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
