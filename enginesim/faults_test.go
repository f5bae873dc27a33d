package enginesim

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

// load starts n requests in the background, each long enough to outlast the
// test; they end when the test does.
func load(t *testing.T, ctx context.Context, url string, n int, body string) {
	t.Helper()
	for range n {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(body))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
}

// linesOf returns the exposition lines that carry label engine="rank".
func linesOf(text, rank string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, `engine="`+rank+`"`) {
			out = append(out, l)
		}
	}
	return out
}

// ranksOf checks that every series of every vllm: family carries an engine
// label and returns, per family, the ranks it has series for.
func ranksOf(t *testing.T, fams map[string]*dto.MetricFamily) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for name, f := range fams {
		if !strings.HasPrefix(name, "vllm:") {
			continue
		}
		for _, m := range f.GetMetric() {
			rank := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "engine" {
					rank = l.GetValue()
				}
			}
			if rank == "" {
				t.Fatalf("%s has a series without an engine label: %v", name, m.GetLabel())
			}
			if !slices.Contains(out[name], rank) {
				out[name] = append(out[name], rank)
			}
		}
	}
	return out
}

func TestDataParallelRoundRobinAndPerRankLimits(t *testing.T) {
	cfg := fastConfig()
	cfg.DataParallel = 3
	cfg.MaxNumSeqs = 2
	e, ts := startEngine(t, cfg)
	errs := make(chan error, 12)
	for range 12 {
		go func() {
			resp, err := http.Post(ts.URL+"/v1/completions", "application/json",
				strings.NewReader(`{"prompt":"x","vigil_sim":{"prompt_tokens":500,"output_tokens":20}}`))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			errs <- err
		}()
	}
	for range 12 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	st := e.Stats()
	if st.Completed != 12 || st.Received != 12 || st.MaxRunning > 2 || len(st.Ranks) != 3 {
		t.Fatalf("stats %+v", st)
	}
	var gen uint64
	for i, r := range st.Ranks {
		if r.Rank != i || r.Received != 4 || r.Completed != 4 || r.Fault != "none" {
			t.Errorf("rank %d: %+v, want 4 received and completed (round-robin)", i, r)
		}
		gen += r.GenerationTokens
	}
	if gen != st.GenerationTokens || gen != 12*20 {
		t.Fatalf("generation tokens: ranks sum %d, total %d, want %d", gen, st.GenerationTokens, 12*20)
	}
	// Every rank's series are in the one exposition, under one header per family.
	fams := scrape(t, ts.URL)
	for name, ranks := range ranksOf(t, fams) {
		if slices.Sort(ranks); !slices.Equal(ranks, []string{"0", "1", "2"}) {
			t.Errorf("%s has series for ranks %v, want 0..2", name, ranks)
		}
	}
	for _, rank := range []string{"0", "1", "2"} {
		if got := sample(t, fams, "vllm:generation_tokens_total", "engine", rank); got != 80 {
			t.Errorf("rank %s generation_tokens_total %v, want 80", rank, got)
		}
	}
	text := scrapeText(t, ts.URL)
	if n := strings.Count(text, "# TYPE vllm:generation_tokens_total counter\n"); n != 1 {
		t.Fatalf("%d TYPE headers for generation_tokens_total, want 1", n)
	}
}

// With several ranks, the exposition is the one-rank exposition with the
// other ranks' series added to each family, in the same family order; zero
// and one rank give the same bytes.
func TestDataParallelExpositionShape(t *testing.T) {
	text := func(dp int) string {
		cfg := DefaultConfig()
		cfg.DataParallel = dp
		var sb strings.Builder
		if err := newRankMetrics(cfg, cfg.ranks())[0].writeText(&sb, 1.7644617e+09); err != nil {
			t.Fatal(err)
		}
		return sb.String()
	}
	one := text(1)
	if text(0) != one {
		t.Fatal("DataParallel 0 and 1 expose different text")
	}
	if one != text(1) || strings.Contains(one, `engine="1"`) {
		t.Fatal("one-rank exposition is not stable or names a second rank")
	}
	var rest []string
	for _, l := range strings.Split(text(2), "\n") {
		if !strings.Contains(l, `engine="1"`) {
			rest = append(rest, l)
		}
	}
	if got := strings.Join(rest, "\n"); got != one {
		t.Fatalf("two-rank exposition without rank 1 differs from the one-rank exposition:\n%s", got)
	}
	// Ranks come in numeric order, not as label text sorts ("10" < "2").
	var ranks []string
	for _, l := range strings.Split(text(12), "\n") {
		if strings.HasPrefix(l, "vllm:num_requests_running{") {
			ranks = append(ranks, l[len(`vllm:num_requests_running{engine="`):strings.Index(l, `",`)])
		}
	}
	if want := strings.Fields("0 1 2 3 4 5 6 7 8 9 10 11"); !slices.Equal(ranks, want) {
		t.Fatalf("running gauge ranks in order %v, want %v", ranks, want)
	}
}

func TestHangRankUnderLoad(t *testing.T) {
	cfg := fastConfig()
	cfg.DataParallel = 2
	e, ts := startEngine(t, cfg)
	if err := e.HangRank(2); err == nil || !strings.Contains(err.Error(), "rank 2") {
		t.Fatalf("HangRank(2) on two ranks: %v", err)
	}
	if err := e.HangRank(-1); err == nil {
		t.Fatal("HangRank(-1) accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// 30,000-token answers: each ~5 minutes of engine time, ~0.3 s of wall.
	load(t, ctx, ts.URL, 6, `{"prompt":"x","vigil_sim":{"prompt_tokens":1000,"output_tokens":30000}}`)
	testinfra.WaitFor(t, 5*time.Second, "both ranks decoding three requests each", func() bool {
		st := e.Stats()
		for _, r := range st.Ranks {
			if r.Running != 3 || r.GenerationTokens <= 10 {
				return false
			}
		}
		return true
	})
	if err := e.HangRank(1); err != nil {
		t.Fatal(err)
	}
	before := e.Stats()
	m1 := scrapeText(t, ts.URL)
	// New work goes round-robin: one of two lands on the hung rank and waits.
	load(t, ctx, ts.URL, 2, `{"prompt":"x","max_tokens":2}`)
	testinfra.WaitFor(t, 5*time.Second, "the hung rank's share to arrive", func() bool { return e.Stats().Ranks[1].Pending == 1 })
	testinfra.WaitFor(t, 5*time.Second, "the live rank to serve its share", func() bool { return e.Stats().Ranks[0].Completed == 1 })
	time.Sleep(50 * time.Millisecond) // ~50 s of engine time
	m2 := scrapeText(t, ts.URL)
	after := e.Stats()

	if a, b := linesOf(m1, "1"), linesOf(m2, "1"); len(a) == 0 || !slices.Equal(a, b) {
		t.Fatalf("rank 1's series moved while it was hung (or are missing): %d lines", len(a))
	}
	if slices.Equal(linesOf(m1, "0"), linesOf(m2, "0")) {
		t.Fatal("rank 0's series froze with rank 1")
	}
	f1, f2 := parseText(t, m1), parseText(t, m2)
	for _, name := range []string{"vllm:generation_tokens_total", "vllm:iteration_tokens_total"} {
		if sample(t, f2, name, "engine", "0") <= sample(t, f1, name, "engine", "0") {
			t.Errorf("rank 0 %s did not advance", name)
		}
	}
	if sample(t, f2, "vllm:num_requests_running", "engine", "1") != 3 {
		t.Errorf("rank 1 running gauge %v, want its 3 stuck requests", sample(t, f2, "vllm:num_requests_running", "engine", "1"))
	}
	for name, ranks := range ranksOf(t, f2) {
		if len(ranks) != 2 {
			t.Errorf("%s has series for ranks %v, want 0 and 1", name, ranks)
		}
	}
	r0, r1 := after.Ranks[0], after.Ranks[1]
	if r1.Steps != before.Ranks[1].Steps || r1.GenerationTokens != before.Ranks[1].GenerationTokens || r1.Running != 3 {
		t.Fatalf("rank 1 moved while hung: %+v -> %+v", before.Ranks[1], r1)
	}
	if r0.Steps <= before.Ranks[0].Steps {
		t.Fatalf("rank 0 stopped: %+v -> %+v", before.Ranks[0], r0)
	}
	if after.Fault != "hang-rank-1" || r1.Fault != "hang" || r0.Fault != "none" {
		t.Fatalf("faults %q, rank 0 %q, rank 1 %q", after.Fault, r0.Fault, r1.Fault)
	}
	e.Clear()
	testinfra.WaitFor(t, 5*time.Second, "rank 1 to resume", func() bool {
		st := e.Stats().Ranks[1]
		return st.Steps > r1.Steps && st.Pending == 0 && st.Completed == 1
	})
	// Hang hangs every rank and says so in one word.
	e.Hang()
	if f := e.Stats().Fault; f != "hang" {
		t.Fatalf("fault after Hang: %q", f)
	}
}

func parseText(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, text)
	}))
	defer srv.Close()
	return scrape(t, srv.URL)
}

func TestDecodeStall(t *testing.T) {
	e, ts := startEngine(t, fastConfig())
	// Normal service first: one request of four tokens, so the decode
	// counter is ahead of the first-token count by three.
	decode(t, post(t, context.Background(), ts.URL+"/v1/completions", "", `{"prompt":"x","max_tokens":4}`))
	decodeTokens := func(f map[string]*dto.MetricFamily) float64 {
		return sample(t, f, "vllm:generation_tokens_total") - sample(t, f, "vllm:time_to_first_token_seconds")
	}
	f0 := scrape(t, ts.URL)
	if decodeTokens(f0) != 3 {
		t.Fatalf("decode tokens before the stall %v, want 3", decodeTokens(f0))
	}

	e.StallDecode()
	if f := e.Stats().Fault; f != "decode-stall" {
		t.Fatalf("fault %q", f)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	results := make(chan map[string]any, 3)
	for range 3 {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/completions",
				strings.NewReader(`{"prompt":"x","vigil_sim":{"prompt_tokens":3000,"output_tokens":10}}`))
			var m map[string]any
			if resp, err := http.DefaultClient.Do(req); err == nil {
				if resp.StatusCode == 200 {
					_ = json.NewDecoder(resp.Body).Decode(&m)
				}
				resp.Body.Close()
			}
			results <- m
		}()
	}
	// A fourth client that will give up.
	quitCtx, quit := context.WithCancel(ctx)
	quitErr := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(quitCtx, http.MethodPost, ts.URL+"/v1/completions",
			strings.NewReader(`{"prompt":"x","max_tokens":10}`))
		_, err := http.DefaultClient.Do(req)
		quitErr <- err
	}()
	testinfra.WaitFor(t, 5*time.Second, "four first tokens", func() bool { return e.Stats().GenerationTokens == 4+4 })
	// One token needs no decode step: it still completes.
	m := decode(t, post(t, context.Background(), ts.URL+"/v1/completions", "", `{"prompt":"x","max_tokens":1}`))
	if u := m["usage"].(map[string]any); u["completion_tokens"] != 1.0 {
		t.Fatalf("max_tokens 1 while decode stalls: %v", m)
	}

	f1 := scrape(t, ts.URL)
	if got, want := sample(t, f1, "vllm:prompt_tokens_total"), sample(t, f0, "vllm:prompt_tokens_total")+3*3000+2*1; got != want {
		t.Errorf("prompt_tokens_total %v, want %v", got, want)
	}
	if got := sample(t, f1, "vllm:time_to_first_token_seconds"); got != 1+5 {
		t.Errorf("first tokens %v, want 6", got)
	}
	if decodeTokens(f1) != 3 {
		t.Errorf("decode tokens moved during the stall: %v, want 3", decodeTokens(f1))
	}
	// The heartbeat moved with the prefills.
	if sample(t, f1, "vllm:iteration_tokens_total") <= sample(t, f0, "vllm:iteration_tokens_total") {
		t.Error("iteration_tokens_total did not move while prefilling")
	}
	if got := sample(t, f1, "vllm:num_requests_running"); got != 4 {
		t.Errorf("running %v, want the 4 requests waiting on decode", got)
	}

	// Nothing is schedulable now: the core waits instead of spinning.
	passes := func() uint64 {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.cores[0].passes
	}
	p0, s0 := passes(), e.Stats().Steps
	time.Sleep(50 * time.Millisecond) // ~50 s of engine time
	if p, s := passes(), e.Stats().Steps; p != p0 || s != s0 {
		t.Fatalf("core spun while stalled: %d scheduling passes, %d steps", p-p0, s-s0)
	}

	// A client leaving a stalled request frees its seat without any step.
	quit()
	if err := <-quitErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("client error %v", err)
	}
	testinfra.WaitFor(t, 5*time.Second, "abort while stalled", func() bool { st := e.Stats(); return st.Aborted == 1 && st.Running == 3 })
	if s := e.Stats().Steps; s != s0 {
		t.Fatalf("abort took %d steps", s-s0)
	}

	e.Clear()
	for range 3 {
		select {
		case m := <-results:
			if m == nil || m["usage"].(map[string]any)["completion_tokens"] != 10.0 {
				t.Fatalf("stalled request after Clear: %v", m)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("stalled requests did not finish after Clear")
		}
	}
	if f := scrape(t, ts.URL); decodeTokens(f) != 3+3*9 {
		t.Fatalf("decode tokens after Clear %v, want %d", decodeTokens(f), 3+3*9)
	}
}

func TestWedge(t *testing.T) {
	e, ts := startEngine(t, fastConfig())
	ctrl := httptest.NewServer(e.ControlHandler())
	defer ctrl.Close()
	e.Wedge()
	if f := e.Stats().Fault; f != "wedge" {
		t.Fatalf("fault %q", f)
	}
	tests := []struct{ method, path, body string }{
		{"GET", "/health", ""},
		{"GET", "/v1/models", ""},
		{"GET", "/metrics", ""},
		{"GET", "/version", ""},
		{"POST", "/v1/completions", `{"prompt":"x","max_tokens":1}`},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}`},
	}
	errs := make(chan error, len(tests))
	for _, tc := range tests {
		go func() {
			cl := &http.Client{Timeout: 200 * time.Millisecond}
			req, _ := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(tc.body))
			resp, err := cl.Do(req)
			if err == nil {
				resp.Body.Close()
				errs <- errors.New(tc.path + " answered " + resp.Status + " while wedged")
				return
			}
			var ne interface{ Timeout() bool }
			if !errors.As(err, &ne) || !ne.Timeout() {
				errs <- errors.New(tc.path + ": not a timeout: " + err.Error())
				return
			}
			errs <- nil
		}()
	}
	for range tests {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	// The control listener still answers.
	resp, err := http.Get(ctrl.URL + "/fault")
	if err != nil {
		t.Fatal(err)
	}
	if m := decode(t, resp); m["fault"] != "wedge" || m["wedged"] != true {
		t.Fatalf("GET /fault while wedged: %v", m)
	}
	// A request held by the wedge is answered once it is cleared.
	held := make(chan int, 1)
	go func() {
		resp, err := http.Get(ts.URL + "/health")
		if err != nil {
			held <- 0
			return
		}
		resp.Body.Close()
		held <- resp.StatusCode
	}()
	select {
	case code := <-held:
		t.Fatalf("held /health answered %d while wedged", code)
	case <-time.After(50 * time.Millisecond):
	}
	e.Clear()
	select {
	case code := <-held:
		if code != 200 {
			t.Fatalf("held /health answered %d after Clear", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("held /health never answered after Clear")
	}
	decode(t, post(t, context.Background(), ts.URL+"/v1/completions", "", `{"prompt":"x","max_tokens":2}`))
}

func TestFailEndpoint(t *testing.T) {
	cfg := fastConfig()
	cfg.APIKey = "k"
	e, ts := startEngine(t, cfg)
	for _, bad := range []struct {
		path string
		code int
		want string
	}{
		{"v1/models", 503, `"v1/models"`},
		{"/v1/models", 200, "200"},
		{"/v1/models", 600, "600"},
	} {
		if err := e.FailEndpoint(bad.path, bad.code); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("FailEndpoint(%q, %d): %v, want an error naming %s", bad.path, bad.code, err, bad.want)
		}
	}
	get := func(path string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+path, nil)
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			_ = json.NewDecoder(resp.Body).Decode(&m)
		}
		return resp.StatusCode, m
	}
	complete := func() int {
		resp := post(t, context.Background(), ts.URL+"/v1/completions", "k", `{"prompt":"x","max_tokens":2}`)
		resp.Body.Close()
		return resp.StatusCode
	}
	tests := []struct {
		name    string
		fail    map[string]int
		fault   string
		want    map[string]int // GET path -> status
		complet int
	}{
		{"models 503", map[string]int{"/v1/models": 503}, "error /v1/models 503",
			map[string]int{"/v1/models": 503, "/health": 200, "/metrics": 200, "/version": 200}, 200},
		{"models 503 and health 500", map[string]int{"/v1/models": 503, "/health": 500}, "error /health 500+error /v1/models 503",
			map[string]int{"/v1/models": 503, "/health": 500, "/metrics": 200}, 200},
		{"completions 502", map[string]int{"/v1/completions": 502}, "error /v1/completions 502",
			map[string]int{"/v1/models": 200, "/health": 200}, 502},
		{"metrics 503", map[string]int{"/metrics": 503}, "error /metrics 503",
			map[string]int{"/metrics": 503, "/v1/models": 200}, 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e.Clear()
			for p, c := range tc.fail {
				if err := e.FailEndpoint(p, c); err != nil {
					t.Fatal(err)
				}
			}
			if f := e.Stats().Fault; f != tc.fault {
				t.Fatalf("fault %q, want %q", f, tc.fault)
			}
			for p, want := range tc.want {
				code, body := get(p)
				if code != want {
					t.Errorf("GET %s: %d, want %d", p, code, want)
				}
				if want >= 500 {
					eb, _ := body["error"].(map[string]any)
					if eb == nil || eb["code"] != float64(want) || eb["type"] == "" || !strings.Contains(eb["message"].(string), p) {
						t.Errorf("GET %s error body %v", p, body)
					}
				}
			}
			if got := complete(); got != tc.complet {
				t.Errorf("completion: %d, want %d", got, tc.complet)
			}
		})
	}
	e.Clear()
	if code, _ := get("/v1/models"); code != 200 || e.Stats().Fault != "none" {
		t.Fatalf("after Clear: /v1/models %d, fault %q", code, e.Stats().Fault)
	}
}

func TestControlPartialFaults(t *testing.T) {
	cfg := fastConfig()
	cfg.DataParallel = 2
	s, err := Start(context.Background(), "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tests := []struct {
		path  string
		code  int
		fault string // or, for 400, a part of the message
	}{
		{"/fault/hang?rank=1", 200, "hang-rank-1"},
		{"/fault/hang?rank=2", 400, "rank 2 out of range"},
		{"/fault/hang?rank=one", 400, "rank must be an integer"},
		{"/fault/hang?rank=", 400, "rank must be an integer"},
		{"/fault/decode-stall", 200, "hang-rank-1+decode-stall"},
		{"/fault/wedge", 200, "hang-rank-1+decode-stall+wedge"},
		{"/fault/error?endpoint=/v1/models&code=503", 200, "hang-rank-1+decode-stall+wedge+error /v1/models 503"},
		{"/fault/error?endpoint=/health", 200, "hang-rank-1+decode-stall+wedge+error /health 503+error /v1/models 503"},
		{"/fault/error?code=503", 400, "endpoint is required"},
		{"/fault/error?endpoint=/health&code=abc", 400, "code must be an HTTP status code"},
		{"/fault/error?endpoint=/health&code=200", 400, "not an error code"},
		{"/fault/error?endpoint=health&code=503", 400, "starting with /"},
		{"/fault/clear", 200, "none"},
		{"/fault/hang?rank=0", 200, "hang-rank-0"},
		{"/fault/hang?rank=1", 200, "hang"},
		{"/fault/clear", 200, "none"},
		{"/fault/hang", 200, "hang"},
		{"/fault/clear", 200, "none"},
	}
	for _, tc := range tests {
		resp, err := http.Post(s.ControlURL()+tc.path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != tc.code {
			resp.Body.Close()
			t.Fatalf("POST %s: %d, want %d", tc.path, resp.StatusCode, tc.code)
		}
		m := decode(t, resp)
		if tc.code == 400 {
			msg, _ := m["error"].(map[string]any)["message"].(string)
			if !strings.Contains(msg, tc.fault) {
				t.Errorf("POST %s: message %q, want it to say %q", tc.path, msg, tc.fault)
			}
			continue
		}
		if m["fault"] != tc.fault {
			t.Errorf("POST %s: fault %v, want %q", tc.path, m["fault"], tc.fault)
		}
	}
	// GET /fault details every fault in force.
	for _, p := range []string{"/fault/hang?rank=1", "/fault/decode-stall", "/fault/wedge", "/fault/error?endpoint=/metrics&code=500"} {
		resp, err := http.Post(s.ControlURL()+p, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := http.Get(s.ControlURL() + "/fault")
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, resp)
	ranks := m["stats"].(map[string]any)["ranks"].([]any)
	if m["fault"] != "hang-rank-1+decode-stall+wedge+error /metrics 500" || m["decode_stall"] != true || m["wedged"] != true ||
		m["errors"].(map[string]any)["/metrics"] != 500.0 || !slices.Equal(m["hung_ranks"].([]any), []any{1.0}) ||
		len(ranks) != 2 || ranks[1].(map[string]any)["fault"] != "hang+decode-stall" {
		t.Fatalf("GET /fault: %v", m)
	}
}

func TestDataParallelValidation(t *testing.T) {
	for _, dp := range []int{-1, maxDataParallel + 1} {
		cfg := DefaultConfig()
		cfg.DataParallel = dp
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "DataParallel") {
			t.Errorf("DataParallel %d: %v", dp, err)
		}
	}
}

func TestAStarvedAPIServerAnswersOnlyPatientClientsAndStreamsGoOn(t *testing.T) {
	cfg := fastConfig()
	cfg.Scale = 10 // a 10 ms step is 1 ms of wall time
	e, ts := startEngine(t, cfg)
	// A stream under way before the starvation.
	resp := post(t, context.Background(), ts.URL+"/v1/completions", "", `{"prompt":"x","max_tokens":100,"stream":true}`)
	defer resp.Body.Close()
	first := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	const delay = 500 * time.Millisecond
	e.StarveAPI(delay)
	if f := e.Stats().Fault; f != "starved-api 500ms" {
		t.Fatalf("fault %q", f)
	}
	start := time.Now()
	rest, err := io.ReadAll(resp.Body)
	if err != nil || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("the stream under way did not go on: %v, %q", err, rest)
	}
	if took := time.Since(start); took >= delay {
		t.Errorf("the stream under way took %s, want it not held by the starvation", took)
	}
	// An impatient client gets no answer; a patient one is served late.
	impatient := &http.Client{Timeout: 100 * time.Millisecond}
	if r, err := impatient.Get(ts.URL + "/health"); err == nil {
		r.Body.Close()
		t.Fatalf("/health answered %s within 100ms while starved for %s", r.Status, delay)
	}
	start = time.Now()
	r, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if took := time.Since(start); r.StatusCode != 200 || took < delay {
		t.Fatalf("/v1/models answered %d after %s, want 200 after %s", r.StatusCode, took, delay)
	}
	e.Clear()
	if r, err := impatient.Get(ts.URL + "/health"); err != nil {
		t.Fatalf("/health after Clear: %v", err)
	} else {
		r.Body.Close()
	}
}
