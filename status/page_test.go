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

	"github.com/vigil-dev/vigil/admission"
	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/pool"
	"github.com/vigil-dev/vigil/pool/coord"
	"github.com/vigil-dev/vigil/recoverer"
	"github.com/vigil-dev/vigil/recovery"
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
		Recovery: recoverer.Snapshot{Active: true, Step: "drain", StepAt: at.Add(-10 * time.Second), Drained: true,
			RestartsInWindow: 1, Budget: 3, BudgetWindow: "6h0m0s", LastError: "haproxy: show stat: 3 sessions still open"},
		Limiter: admission.Stats{Calls: 41200, Executions: 40100, Admitted: 39800, InFlight: 6, Cap: 24,
			FirstTokenLimit: 2, AwaitingFirstToken: 1, TTFTObjective: 668 * time.Millisecond, QueueDepth: 9, OldestQueued: 14 * time.Second, Recovering: true,
			Rejected: map[string]uint64{admission.ReasonRecovering: 312, admission.ReasonQueueFull: 0}},
		Pool: []pool.Member{{Node: "gpu-node-08", State: "saturated", Waiting: 31, Running: 64},
			{Node: "gpu-node-09", Err: "dial tcp 10.0.0.9:9108: connection refused"}},
		Engine: "http://127.0.0.1:8000", Started: at.Add(-(3*time.Hour + 12*time.Minute)),
		Plan: &Plan{Restart: "docker", RestartTarget: "container vllm", LoadBalancer: "haproxy", DrainTarget: "vllm/node1 at HAProxy",
			Summary: "Will drain vllm/node1 at HAProxy, restart container vllm, restore traffic gradually (10% → 100% over 2m)."},
		RunbookURL: "https://wiki.example.com/runbooks/vigil#hung",
		LastIncident: &watchdog.Incident{ID: "gpu-node-07-20250601T081500Z-2", Opened: at.Add(-4 * time.Hour), Peak: watchdog.StateSaturated,
			State: watchdog.StateHealthy, Resolved: at.Add(-4*time.Hour + 25*time.Minute)},
	}
}

// noRestarterSnapshot: restart.kind none and no load balancer, the engine
// hung, the recovery refusing with a backoff it will never use.
func noRestarterSnapshot() Snapshot {
	at := t0
	return Snapshot{
		Node: "gpu-node-03", At: at, Engine: "http://127.0.0.1:8000", Started: at.Add(-time.Hour),
		Verdict:  watchdog.Verdict{State: watchdog.StateHung, At: at, Reason: "HUNG: no progress for 3m05s with 12 waiting, 6 running"},
		Incident: &watchdog.Incident{ID: "inc-none", Opened: at.Add(-time.Minute), State: watchdog.StateHung, Peak: watchdog.StateHung},
		Recovery: recoverer.Snapshot{Incident: "inc-none", Step: recovery.StepGuardRefused, StepAt: at.Add(-4 * time.Second),
			Budget: 3, BudgetWindow: "1h0m0s", NextAttempt: at.Add(19 * time.Second)},
		Plan: &Plan{Restart: "none", LoadBalancer: "none",
			Summary: "No restarter is configured (restart.kind none): vigil leaves the engine as it is. No load balancer is configured either, so the host still takes traffic. To recover, restart the engine by hand (or set restart.kind); this incident resolves once it serves again."},
	}
}

// recoveredSnapshot: healthy again after an incident whose recovery
// failed a step before the engine came back by other means.
func recoveredSnapshot() Snapshot {
	at := t0
	return Snapshot{
		Node: "gpu-node-04", At: at,
		Verdict: watchdog.Verdict{State: watchdog.StateHealthy, At: at, Reason: "HEALTHY: 2,340 tok/s"},
		Recovery: recoverer.Snapshot{Incident: "inc-old", Step: recovery.StepFailed, StepAt: at.Add(-10 * time.Minute),
			Budget: 3, BudgetWindow: "1h0m0s", RestartsInWindow: 1, LastRestart: at.Add(-12 * time.Minute),
			NextAttempt: at.Add(-5 * time.Minute), LastError: "engine not ready 20m after the restart"},
		LastIncident: &watchdog.Incident{ID: "inc-old", Opened: at.Add(-15 * time.Minute), Peak: watchdog.StateHung,
			State: watchdog.StateHealthy, Resolved: at.Add(-2 * time.Minute)},
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
			"3 sessions still open", "6 / 24 (fixed, recovering)", "streams awaiting first token / limit</th><td class=\"n\">1 / 2", "first-token objective</th><td class=\"n\">668ms (p90)", "9 waiting, oldest 14s", "41,200 / 40,100",
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
		{"it says what it watches and would do, since when, and where the runbook is", hungSnapshot(), []string{
			`engine <span class="engine">http://127.0.0.1:8000</span>`, "up 3h12m",
			`<a class="runbook" href="https://wiki.example.com/runbooks/vigil#hung">runbook</a>`,
			"restart: docker (container vllm) · load balancer: haproxy (vllm/node1 at HAProxy)",
			"Will drain vllm/node1 at HAProxy, restart container vllm",
			"last incident</th><td>gpu-node-07-20250601T081500Z-2: SATURATED, resolved 3h35m ago after 25m",
		}, nil},
		{"restart.kind none: no restart words", noRestarterSnapshot(), []string{
			"restart: none · load balancer: none", "No restarter is configured (restart.kind none)", "restart the engine by hand",
		}, []string{"restarts", "of 3", "next attempt", "in 19s", "restarting", "Will restart", "runbook"}},
		{"a next attempt whose time has passed is due, not hours ago", func() Snapshot {
			s := hungSnapshot()
			r := s.Recovery.(recoverer.Snapshot)
			r.NextAttempt = t0.Add(-4700 * time.Millisecond)
			s.Recovery = r
			return s
		}(), []string{"next attempt</th><td>due: at the next verdict that needs it"}, []string{"4.7s ago"}},
		{"after a recovery, the failed step and its error are history", recoveredSnapshot(), []string{
			`class="state ok">HEALTHY<`, `recovery step</th><td><span class="none">idle</span>`, "last incident</th><td>inc-old: HUNG, resolved 2m00s ago after 13m",
			"1 of 3 in 1h0m0s",
		}, []string{"last error", "engine not ready", "failed", "next attempt", "5m00s ago</td>"}},
		{"saturated at the limiter: the shed rate and the window in force", Snapshot{Node: "n", At: t0,
			Verdict: watchdog.Verdict{State: watchdog.StateSaturated, At: t0,
				Reason: "SATURATED at the limiter: shedding 63% of 400 calls in the last 4 cycles, 2 queued in vigil; the engine shallow",
				Evidence: watchdog.Evidence{Waiting: 1, Running: 30, ShedRate: 0.63, ShedCalls: 400, LimiterQueued: 2, LimiterOnly: true,
					HangAfter: 15 * time.Second, HangAfterWhy: "hang_after 15s (auto, the floor): longest prefill in flight 2,400 tokens at 41,000 tok/s; x3 margin",
					HangAfterFrom: "prefill rate: 41,000 tok/s by the engine's prefill-time histogram; no silence with work pending logged; max_model_len 131,072"}}},
			[]string{"limiter sheds</th><td class=\"n\">63.0% of 400 calls (last 4 cycles), 2 queued",
				"hang_after</th><td>hang_after 15s (auto, the floor): longest prefill in flight 2,400 tokens",
				"learned from</th><td>prefill rate: 41,000 tok/s by the engine&#39;s prefill-time histogram"}, nil},
		{"calls held for a recovery, and what became of those cut", func() Snapshot {
			s := hungSnapshot()
			st := s.Limiter.(admission.Stats)
			st.HeldNow, st.Moved, st.Continued = 4, 14, 3
			st.Lost = map[string]uint64{"n_gt_1": 1}
			s.Limiter = st
			return s
		}(), []string{"held for the recovery</th><td class=\"n\">4 calls cut from the engine, sent again once it serves",
			"calls cut by a lost engine</th><td class=\"n\">14 moved to peers, 3 streams continued, 1 lost: n_gt_1"}, nil},
		{"calls refused while the engine was held are lost, never none lost", func() Snapshot {
			s := hungSnapshot()
			st := s.Limiter.(admission.Stats)
			st.Moved, st.Continued = 13, 3
			st.HeldRefused = map[string]uint64{"stream_deadline": 20, "queue_timeout": 1}
			st.Suspected, st.Suspicions, st.FalseSuspicions, st.Diverted = true, 2, 1, 6
			s.Limiter = st
			return s
		}(), []string{"13 moved to peers, 3 streams continued, 21 lost: 21 refused while held (1 queue_timeout, 20 stream_deadline)",
			"stall suspicion</th><td class=\"n\"><span class=\"warn\">suspected now</span>: nothing new goes to the engine; 2 raised, 1 false (progress resumed), 6 calls sent to a peer instead"},
			[]string{"none lost"}},
		{"cut calls lost and one refused while held", func() Snapshot {
			s := hungSnapshot()
			st := s.Limiter.(admission.Stats)
			st.Lost = map[string]uint64{"n_gt_1": 1}
			st.HeldRefused = map[string]uint64{"recovering": 1}
			s.Limiter = st
			return s
		}(), []string{"2 lost: 1 n_gt_1, 1 refused while held (recovering)"}, []string{"none lost", "stall suspicion"}},
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
	chromium := findChromium(t)
	addr := serveSnapshot(t, hungSnapshot)
	dir := t.TempDir()
	shot := filepath.Join(dir, "page.png")
	const width, height = 1280, 900
	out := runChromium(t, chromium, dir, "--hide-scrollbars", "--window-size=1280,900", "--screenshot="+shot, "http://"+addr+"/")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v\n%s", err, out)
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

// What the operator must see first, read from the DOM headless Chromium
// rendered: the engine, what recovery would do, vigil's uptime, the last
// incident and the runbook link; and with restart.kind none, no word of
// restarts to come, and no stale error under a green HEALTHY.
func TestPageInChromiumSaysWhatRecoveryWouldDo(t *testing.T) {
	chromium := findChromium(t)
	cases := []struct {
		name    string
		snap    func() Snapshot
		want    []string
		notWant []string
	}{
		{"a hung engine mid-recovery", hungSnapshot, []string{
			"engine http://127.0.0.1:8000", "up 3h12m", `href="https://wiki.example.com/runbooks/vigil#hung"`, ">runbook</a>",
			"recovery would", "restart: docker (container vllm) · load balancer: haproxy (vllm/node1 at HAProxy)",
			"last incident", "gpu-node-07-20250601T081500Z-2: SATURATED",
		}, nil},
		{"restart.kind none", noRestarterSnapshot, []string{
			"restart: none · load balancer: none", "restart the engine by hand",
		}, []string{"restarts", "next attempt", "restarting", "Will restart"}},
		{"after a recovery", recoveredSnapshot, []string{"HEALTHY", "idle", "inc-old: HUNG"},
			[]string{"last error", "engine not ready", "failed"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := serveSnapshot(t, tc.snap)
			dom := runChromium(t, chromium, t.TempDir(), "--dump-dom", "http://"+addr+"/")
			if !strings.Contains(dom, "</html>") {
				t.Fatalf("chromium printed no page:\n%s", dom)
			}
			text := tagless(dom)
			for _, w := range tc.want {
				if !strings.Contains(dom, w) && !strings.Contains(text, w) {
					t.Errorf("rendered page lacks %q:\n%s", w, text)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(text, w) {
					t.Errorf("rendered page says %q:\n%s", w, text)
				}
			}
		})
	}
}

// tagless is the page's text with its tags and repeated spaces removed.
func tagless(dom string) string {
	var b strings.Builder
	in := false
	for _, r := range dom {
		switch {
		case r == '<':
			in = true
		case r == '>':
			in = false
			b.WriteByte(' ')
		case !in:
			b.WriteRune(r)
		}
	}
	return strings.Join(strings.Fields(strings.NewReplacer("&amp;", "&", "&lt;", "<", "&gt;", ">").Replace(b.String())), " ")
}

// findChromium is the headless browser's path, under testinfra's require
// rule: without one the test skips, except in CI, where test.sh installs
// it and a skip would hide a broken page.
func findChromium(t *testing.T) string {
	t.Helper()
	return testinfra.LookPath(t, "CHROMIUM", testinfra.RequireChromiumEnv, "chromium", "chromium-browser", "google-chrome")
}

// serveSnapshot serves the status endpoints for snap on a loopback port
// until the test ends, and returns its address.
func serveSnapshot(t *testing.T, snap func() Snapshot) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := New(Options{Listen: ln.Addr().String(), Snapshot: snap})
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String()
}

// runChromium runs headless Chromium with args, a fresh profile in dir
// and nothing fetched but the page, and returns what it printed.
func runChromium(t *testing.T, chromium, dir string, args ...string) string {
	t.Helper()
	ctx, stop := context.WithTimeout(context.Background(), 60*time.Second)
	defer stop()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--no-first-run", "--disable-extensions", "--user-data-dir=" + filepath.Join(dir, "profile")}
	cmd := exec.CommandContext(ctx, chromium, append(base, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	return out.String()
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

// The pool section shows the queue for the turns: who holds one, then who
// waits, in the order their turns come.
func TestRenderPageShowsTheTurnQueue(t *testing.T) {
	snap := hungSnapshot()
	snap.Turns = coord.TurnQueue{Max: 1,
		Holding: []coord.Holder{{Node: "gpu-node-08", Incident: "inc-8", Since: t0.Add(-40 * time.Second)}},
		Waiting: []coord.Holder{{Node: "gpu-node-07", Incident: "inc-7", Since: t0.Add(-30 * time.Second)},
			{Node: "gpu-node-11", Incident: "inc-11", Since: t0.Add(-5 * time.Second)}}}
	body, err := renderPage(snap)
	if err != nil {
		t.Fatal(err)
	}
	page := string(body)
	want := []string{"Turns to recover (1 of 1 held, 2 waiting)",
		"<td>holds</td><td>gpu-node-08</td><td>inc-8</td>",
		"<td>waits 1</td><td>gpu-node-07</td><td>inc-7</td>",
		"<td>waits 2</td><td>gpu-node-11</td><td>inc-11</td>"}
	last := -1
	for _, w := range want {
		i := strings.Index(page, w)
		if i < 0 {
			t.Fatalf("page lacks %q", w)
		}
		if i < last {
			t.Errorf("%q out of order", w)
		}
		last = i
	}
	if body, _ := renderPage(hungSnapshot()); strings.Contains(string(body), "Turns to recover") {
		t.Error("a pool without coordination shows a turn queue")
	}
}
