package enginesim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

// fastConfig runs engine time 1000x faster than wall time: a 10 ms step
// sleeps 10 µs.
func fastConfig() Config {
	c := DefaultConfig()
	c.Model = "test-model"
	c.Scale = 1000
	return c
}

func startEngine(t *testing.T, cfg Config) (*Engine, *httptest.Server) {
	t.Helper()
	e := New(cfg)
	ts := httptest.NewServer(e.Handler())
	t.Cleanup(func() {
		e.Close()
		ts.Close()
	})
	return e, ts
}

func post(t *testing.T, ctx context.Context, url, key, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func decode(t *testing.T, resp *http.Response) map[string]any {
	t.Helper()
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestAPICompletions(t *testing.T) {
	_, ts := startEngine(t, fastConfig())
	tests := []struct {
		name, path, body  string
		code              int
		finish            string
		promptTok, outTok float64
		errType           string
	}{
		{"completion default 16", "/v1/completions", `{"model":"test-model","prompt":"hello there, engine"}`, 200, "length", 5, 16, ""},
		{"completion max_tokens", "/v1/completions", `{"prompt":"abcd","max_tokens":3}`, 200, "length", 1, 3, ""},
		{"completion token ids", "/v1/completions", `{"prompt":[1,2,3,4,5,6,7],"max_tokens":1}`, 200, "length", 7, 1, ""},
		{"completion sim ext stop", "/v1/completions", `{"prompt":"x","max_tokens":50,"vigil_sim":{"prompt_tokens":12000,"prefix_tokens":2000,"prefix_id":"p1","output_tokens":30}}`, 200, "stop", 12000, 30, ""},
		{"sim output capped by max_tokens", "/v1/completions", `{"prompt":"x","max_tokens":5,"vigil_sim":{"output_tokens":30}}`, 200, "length", 1, 5, ""},
		{"chat", "/v1/chat/completions", `{"model":"test-model","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`, 200, "length", 5, 4, ""},
		{"chat max_completion_tokens", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"text","text":"hello"}]}],"max_completion_tokens":2}`, 200, "length", 6, 2, ""},
		{"invalid json", "/v1/completions", `{"prompt":`, 400, "", 0, 0, "BadRequestError"},
		{"missing prompt", "/v1/completions", `{"max_tokens":3}`, 400, "", 0, 0, "BadRequestError"},
		{"missing messages", "/v1/chat/completions", `{"prompt":"x"}`, 400, "", 0, 0, "BadRequestError"},
		{"bad max_tokens", "/v1/completions", `{"prompt":"x","max_tokens":0}`, 400, "", 0, 0, "BadRequestError"},
		{"prefix longer than prompt", "/v1/completions", `{"prompt":"x","vigil_sim":{"prompt_tokens":10,"prefix_tokens":20}}`, 400, "", 0, 0, "BadRequestError"},
		{"too long", "/v1/completions", `{"prompt":"x","vigil_sim":{"prompt_tokens":200000}}`, 400, "", 0, 0, "BadRequestError"},
		{"unknown model", "/v1/completions", `{"model":"other","prompt":"x"}`, 404, "", 0, 0, "NotFoundError"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, context.Background(), ts.URL+tc.path, "", tc.body)
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.code)
			}
			m := decode(t, resp)
			if tc.code != 200 {
				e, ok := m["error"].(map[string]any)
				if !ok || e["type"] != tc.errType || e["message"] == "" {
					t.Fatalf("error body %v", m)
				}
				return
			}
			ch := m["choices"].([]any)[0].(map[string]any)
			if ch["finish_reason"] != tc.finish {
				t.Fatalf("finish_reason %v, want %s", ch["finish_reason"], tc.finish)
			}
			u := m["usage"].(map[string]any)
			if u["prompt_tokens"] != tc.promptTok || u["completion_tokens"] != tc.outTok ||
				u["total_tokens"] != tc.promptTok+tc.outTok {
				t.Fatalf("usage %v, want %v+%v", u, tc.promptTok, tc.outTok)
			}
			if strings.Contains(tc.path, "chat") {
				msg := ch["message"].(map[string]any)
				if m["object"] != "chat.completion" || msg["role"] != "assistant" ||
					len(strings.Fields(msg["content"].(string))) != int(tc.outTok) {
					t.Fatalf("chat body %v", m)
				}
			} else if m["object"] != "text_completion" || len(strings.Fields(ch["text"].(string))) != int(tc.outTok) {
				t.Fatalf("completion body %v", m)
			}
		})
	}
}

func TestAPIKey(t *testing.T) {
	cfg := fastConfig()
	cfg.APIKey = "sekret"
	_, ts := startEngine(t, cfg)
	tests := []struct {
		name, method, path, key string
		code                    int
	}{
		{"models no key", "GET", "/v1/models", "", 401},
		{"models wrong key", "GET", "/v1/models", "nope", 401},
		{"models key", "GET", "/v1/models", "sekret", 200},
		{"completion no key", "POST", "/v1/completions", "", 401},
		{"completion key", "POST", "/v1/completions", "sekret", 200},
		{"chat no key", "POST", "/v1/chat/completions", "", 401},
		{"health is open", "GET", "/health", "", 200},
		{"metrics is open", "GET", "/metrics", "", 200},
		{"version is open", "GET", "/version", "", 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"prompt":"x","max_tokens":1}`
			if strings.Contains(tc.path, "chat") {
				body = `{"messages":[{"role":"user","content":"x"}],"max_tokens":1}`
			}
			req, _ := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(body))
			if tc.key != "" {
				req.Header.Set("Authorization", "Bearer "+tc.key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.code)
			}
			if tc.code == 401 {
				var m struct {
					Error struct{ Message, Type string } `json:"error"`
				}
				if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || m.Error.Message == "" {
					t.Fatalf("401 body not OpenAI-shaped: %v %+v", err, m)
				}
			}
		})
	}
}

func TestAPIModels(t *testing.T) {
	_, ts := startEngine(t, fastConfig())
	resp, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, resp)
	data := m["data"].([]any)
	if m["object"] != "list" || len(data) != 1 || data[0].(map[string]any)["id"] != "test-model" {
		t.Fatalf("models %v", m)
	}
}

// readSSE reads a whole event stream and returns the data payloads.
func readSSE(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	blank := true
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			blank = true
			continue
		}
		if !blank || !strings.HasPrefix(line, "data: ") {
			t.Fatalf("bad SSE framing at %q", line)
		}
		blank = false
		out = append(out, strings.TrimPrefix(line, "data: "))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAPIStreaming(t *testing.T) {
	_, ts := startEngine(t, fastConfig())
	tests := []struct {
		name, path, body string
		usage            bool
	}{
		{"completion", "/v1/completions", `{"prompt":"hi","max_tokens":5,"stream":true}`, false},
		{"completion usage", "/v1/completions", `{"prompt":"hi","max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`, true},
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true}`, false},
		{"chat usage", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"vigil_sim":{"output_tokens":5}}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := post(t, context.Background(), ts.URL+tc.path, "", tc.body)
			defer resp.Body.Close()
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("status %d type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			events := readSSE(t, resp.Body)
			if len(events) == 0 || events[len(events)-1] != "[DONE]" {
				t.Fatalf("stream does not end in [DONE]: %q", events)
			}
			chat := strings.Contains(tc.path, "chat")
			tokens, finishes := 0, 0
			var gotUsage map[string]any
			for _, ev := range events[:len(events)-1] {
				var c map[string]any
				if err := json.Unmarshal([]byte(ev), &c); err != nil {
					t.Fatalf("chunk %q: %v", ev, err)
				}
				wantObj := "text_completion"
				if chat {
					wantObj = "chat.completion.chunk"
				}
				if c["object"] != wantObj || c["id"] == "" {
					t.Fatalf("chunk %v", c)
				}
				if u, ok := c["usage"].(map[string]any); ok {
					gotUsage = u
				}
				for _, x := range c["choices"].([]any) {
					ch := x.(map[string]any)
					if ch["finish_reason"] != nil {
						finishes++
					}
					if chat {
						tokens += len(strings.Fields(ch["delta"].(map[string]any)["content"].(string)))
					} else {
						tokens += len(strings.Fields(ch["text"].(string)))
					}
				}
			}
			if tokens != 5 || finishes != 1 {
				t.Fatalf("%d tokens and %d finish chunks, want 5 and 1", tokens, finishes)
			}
			if tc.usage != (gotUsage != nil) || (gotUsage != nil && gotUsage["completion_tokens"] != 5.0) {
				t.Fatalf("usage %v, want present=%v", gotUsage, tc.usage)
			}
		})
	}
}

// The stream is flushed token by token: the first chunk arrives long before
// the last is produced.
func TestAPIStreamingFlushes(t *testing.T) {
	cfg := fastConfig()
	cfg.Scale = 10 // a ~10 ms decode step sleeps ~1 ms
	_, ts := startEngine(t, cfg)
	resp := post(t, context.Background(), ts.URL+"/v1/completions", "", `{"prompt":"hi","max_tokens":200,"stream":true}`)
	defer resp.Body.Close()
	start := time.Now()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("first line %q %v", line, err)
	}
	first := time.Since(start)
	_, _ = io.Copy(io.Discard, br)
	if total := time.Since(start); first > total/2 {
		t.Fatalf("first chunk after %v of %v: not flushed as produced", first, total)
	}
}

// metricsText fetches /metrics and parses it with expfmt, as vigil does.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics status %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// sample returns the value of name's series with the given extra labels.
func sample(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("metric %s missing", name)
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			if !hasLabel(m, labels[i], labels[i+1]) {
				continue next
			}
		}
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue()
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("metric %s%v has no such series", name, labels)
	return 0
}

func TestMetricsExposition(t *testing.T) {
	_, ts := startEngine(t, fastConfig())
	resp := post(t, context.Background(), ts.URL+"/v1/completions", "",
		`{"prompt":"x","vigil_sim":{"prompt_tokens":3000,"prefix_tokens":1000,"prefix_id":"a","output_tokens":7}}`)
	decode(t, resp)
	fams := scrape(t, ts.URL)
	tests := []struct {
		name   string
		typ    dto.MetricType
		labels []string // extra labels, besides engine and model_name
		want   float64  // -1: any
	}{
		{"vllm:num_requests_running", dto.MetricType_GAUGE, nil, 0},
		{"vllm:num_requests_waiting", dto.MetricType_GAUGE, nil, 0},
		{"vllm:kv_cache_usage_perc", dto.MetricType_GAUGE, nil, 0},
		{"vllm:prompt_tokens_total", dto.MetricType_COUNTER, nil, 3000},
		{"vllm:generation_tokens_total", dto.MetricType_COUNTER, nil, 7},
		{"vllm:prefix_cache_queries_total", dto.MetricType_COUNTER, nil, 3000},
		{"vllm:prefix_cache_hits_total", dto.MetricType_COUNTER, nil, 0},
		{"vllm:num_preemptions_total", dto.MetricType_COUNTER, nil, 0},
		{"vllm:request_success_total", dto.MetricType_COUNTER, []string{"finished_reason", "stop"}, 1},
		{"vllm:request_success_total", dto.MetricType_COUNTER, []string{"finished_reason", "length"}, 0},
		{"vllm:request_success_total", dto.MetricType_COUNTER, []string{"finished_reason", "abort"}, 0},
		{"vllm:iteration_tokens_total", dto.MetricType_HISTOGRAM, nil, 7}, // one prefill step, six decode steps
		{"vllm:time_to_first_token_seconds", dto.MetricType_HISTOGRAM, nil, 1},
		{"vllm:e2e_request_latency_seconds", dto.MetricType_HISTOGRAM, nil, 1},
		{"vllm:request_queue_time_seconds", dto.MetricType_HISTOGRAM, nil, 1},
		{"vllm:request_prefill_time_seconds", dto.MetricType_HISTOGRAM, nil, 1},
		{"vllm:num_requests_waiting_by_reason", dto.MetricType_GAUGE, []string{"reason", "capacity"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name+strings.Join(tc.labels, "="), func(t *testing.T) {
			f := fams[tc.name]
			if f == nil || f.GetType() != tc.typ || f.GetHelp() == "" {
				t.Fatalf("family %s missing or wrong type/help: %v", tc.name, f)
			}
			labels := append([]string{"engine", "0", "model_name", "test-model"}, tc.labels...)
			if got := sample(t, fams, tc.name, labels...); tc.want >= 0 && got != tc.want {
				t.Fatalf("%s = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
	// The iteration histogram's sum is prompt + generation tokens, as in vLLM.
	h := fams["vllm:iteration_tokens_total"].GetMetric()[0].GetHistogram()
	if h.GetSampleSum() != 3007 {
		t.Fatalf("iteration sum %v, want 3007", h.GetSampleSum())
	}
	if _, ok := fams["vllm:cache_config_info"]; !ok {
		t.Fatal("cache_config_info missing")
	}
}

// The exposition must use the fixture's HELP texts and label order.
func TestMetricsMatchFixture(t *testing.T) {
	raw, err := readFixture()
	if err != nil {
		t.Fatal(err)
	}
	_, ts := startEngine(t, DefaultConfig())
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	ours := string(body)
	for _, line := range strings.Split(raw, "\n") {
		if !strings.HasPrefix(line, "# HELP vllm:") && !strings.HasPrefix(line, "# TYPE vllm:") {
			continue
		}
		name := strings.Fields(line)[2]
		if strings.HasSuffix(name, "_created") {
			continue // Python client only
		}
		if !strings.Contains(ours, line+"\n") {
			t.Errorf("missing line %q", line)
		}
	}
	for _, want := range []string{
		`vllm:request_success_total{engine="0",finished_reason="stop",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0`,
		`vllm:iteration_tokens_total_bucket{engine="0",le="16384.0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0`,
		`vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0`,
		`vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",num_gpu_blocks="250000"} 1.0`,
		`vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0`,
	} {
		if !strings.Contains(ours, want) {
			t.Errorf("missing series %q", want)
		}
	}
}

func TestHealthAfterCrash(t *testing.T) {
	e, ts := startEngine(t, fastConfig())
	get := func(p string) int {
		resp, err := http.Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if get("/health") != 200 {
		t.Fatal("health not 200")
	}
	e.Crash()
	if get("/health") != 503 {
		t.Fatal("health not 503 with a dead core")
	}
	resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x"}`))
	if err == nil {
		resp.Body.Close()
		t.Fatal("completion on a dead core should drop the connection")
	}
}

func TestHangFreezesEverything(t *testing.T) {
	e, ts := startEngine(t, fastConfig())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Background load: long answers so work is in flight when we hang.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 4; i++ {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/completions",
				strings.NewReader(`{"prompt":"x","vigil_sim":{"prompt_tokens":20000,"output_tokens":2000}}`))
			go func() {
				if resp, err := http.DefaultClient.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
	}()
	<-done
	// All four in the core before the hang: one still on its way would
	// arrive while hung beside the arrival below (CI saw Pending 2).
	testinfra.WaitFor(t, 5*time.Second, "load running", func() bool {
		st := e.Stats()
		return st.GenerationTokens > 10 && st.Running+st.Waiting == 4 && st.Pending == 0
	})
	e.Hang()
	before := e.Stats()
	m1 := scrapeText(t, ts.URL)
	// New work arrives while hung: it must not move any gauge either.
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/completions", strings.NewReader(`{"prompt":"x"}`))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	testinfra.WaitFor(t, 5*time.Second, "arrival while hung", func() bool { return e.Stats().Pending == 1 })
	time.Sleep(100 * time.Millisecond) // ~100 s of engine time
	for _, p := range []string{"/v1/models", "/health", "/metrics", "/version"} {
		resp, err := http.Get(ts.URL + p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s while hung: %v %v", p, err, resp)
		}
		resp.Body.Close()
	}
	m2 := scrapeText(t, ts.URL)
	if m1 != m2 {
		t.Fatal("metrics moved while hung")
	}
	after := e.Stats()
	if after.Steps != before.Steps || after.GenerationTokens != before.GenerationTokens || after.Running != before.Running {
		t.Fatalf("core moved while hung: %+v -> %+v", before, after)
	}
	if after.Fault != "hang" {
		t.Fatalf("fault %q", after.Fault)
	}
	e.Clear()
	testinfra.WaitFor(t, 5*time.Second, "progress after clear", func() bool { return e.Stats().Steps > after.Steps })
}

func scrapeText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestSlowFault(t *testing.T) {
	e, ts := startEngine(t, fastConfig())
	run := func() float64 {
		st := e.Stats()
		decode(t, post(t, context.Background(), ts.URL+"/v1/completions", "", `{"prompt":"x","max_tokens":20}`))
		return float64(e.Stats().BusyTime - st.BusyTime)
	}
	base := run()
	e.Slow(10)
	slow := run()
	e.Clear()
	if slow < 9*base || slow > 11*base {
		t.Fatalf("slowed run took %v engine ns vs %v: not slower", slow, base)
	}
}

func TestAbortOnDisconnect(t *testing.T) {
	tests := []struct {
		name  string
		abort bool
	}{
		{"abort on", true},
		{"abort off runs to completion", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fastConfig()
			cfg.AbortOnDisconnect = tc.abort
			cfg.Scale = 100 // ~10 ms decode steps take ~0.1 ms
			e, ts := startEngine(t, cfg)
			ctx, cancel := context.WithCancel(context.Background())
			resp := post(t, ctx, ts.URL+"/v1/completions", "",
				`{"prompt":"x","stream":true,"vigil_sim":{"prompt_tokens":100,"output_tokens":1000}}`)
			br := bufio.NewReader(resp.Body)
			if _, err := br.ReadString('\n'); err != nil { // first token arrived
				t.Fatal(err)
			}
			cancel()
			resp.Body.Close()
			if tc.abort {
				testinfra.WaitFor(t, 5*time.Second, "abort", func() bool { return e.Stats().Aborted == 1 })
				st := e.Stats()
				if st.Completed != 0 || st.Running != 0 || st.GenerationTokens >= 1000 {
					t.Fatalf("stats after abort: %+v", st)
				}
				return
			}
			testinfra.WaitFor(t, 5*time.Second, "completion", func() bool { return e.Stats().Completed == 1 })
			if st := e.Stats(); st.Aborted != 0 || st.GenerationTokens != 1000 {
				t.Fatalf("stats: %+v", st)
			}
		})
	}
}

// Disconnect while waiting: the request leaves the queue without being run.
func TestAbortWhileWaiting(t *testing.T) {
	cfg := fastConfig()
	e, ts := startEngine(t, cfg)
	e.Hang()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/completions", strings.NewReader(`{"prompt":"x"}`))
		_, err := http.DefaultClient.Do(req)
		errc <- err
	}()
	testinfra.WaitFor(t, 5*time.Second, "arrival", func() bool { return e.Stats().Pending == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client error %v", err)
	}
	time.Sleep(10 * time.Millisecond) // let the handler post its abort
	e.Clear()
	testinfra.WaitFor(t, 5*time.Second, "abort", func() bool { return e.Stats().Aborted == 1 })
	if st := e.Stats(); st.Admitted != 0 || st.Steps != 0 {
		t.Fatalf("aborted waiting request was run: %+v", st)
	}
}

// Under concurrent load the engine batches and respects max_num_seqs.
func TestConcurrentLoadBatches(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxNumSeqs = 4
	e, ts := startEngine(t, cfg)
	errs := make(chan error, 12)
	for range 12 {
		go func() {
			resp, err := http.Post(ts.URL+"/v1/completions", "application/json",
				strings.NewReader(`{"prompt":"x","vigil_sim":{"prompt_tokens":500,"output_tokens":20}}`))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
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
	if st.Completed != 12 || st.MaxRunning > 4 || st.MaxRunning < 2 || st.Received != 12 {
		t.Fatalf("stats %+v", st)
	}
}

func TestServerLoadTimeCrashAndLeaks(t *testing.T) {
	base := runtime.NumGoroutine()
	cfg := fastConfig()
	cfg.Scale = 100
	cfg.LoadTime = 20 * time.Second // 200 ms of wall time
	s, err := Start(context.Background(), "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	refused := func() bool {
		c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err == nil {
			c.Close()
			return false
		}
		return true
	}
	if !refused() {
		t.Fatal("API port open while loading")
	}
	// The control port answers during load.
	resp, err := http.Get(s.ControlURL() + "/fault")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("control while loading: %v", err)
	}
	resp.Body.Close()
	select {
	case <-s.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("never loaded")
	}
	resp, err = http.Get(s.URL() + "/v1/models")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("models after load: %v", err)
	}
	resp.Body.Close()
	decode(t, post(t, context.Background(), s.URL()+"/v1/completions", "", `{"prompt":"x","max_tokens":2}`))

	resp, err = http.Post(s.ControlURL()+"/fault/crash", "", nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("crash: %v", err)
	}
	resp.Body.Close()
	<-s.Done()
	testinfra.WaitFor(t, 5*time.Second, "port refuses", refused)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	http.DefaultClient.CloseIdleConnections()
	testinfra.WaitFor(t, 5*time.Second, "goroutines to exit", func() bool { return runtime.NumGoroutine() <= base })
}

func TestServerControlFaults(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, "127.0.0.1:0", fastConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	<-s.Ready()
	tests := []struct {
		method, path string
		code         int
		fault        string
	}{
		{"POST", "/fault/hang", 200, "hang"},
		{"GET", "/fault", 200, "hang"},
		{"POST", "/fault/clear", 200, "none"},
		{"POST", "/fault/slow?factor=3", 200, "slow"},
		{"POST", "/fault/slow?factor=x", 400, ""},
		{"POST", "/fault/clear", 200, "none"},
		{"GET", "/fault/hang", 405, ""},
	}
	for _, tc := range tests {
		req, _ := http.NewRequest(tc.method, s.ControlURL()+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != tc.code {
			t.Fatalf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.code)
		}
		if tc.fault != "" {
			if m := decode(t, resp); m["fault"] != tc.fault {
				t.Fatalf("%s: fault %v, want %s", tc.path, m["fault"], tc.fault)
			}
		} else {
			resp.Body.Close()
		}
	}
	cancel() // ctx ends the server
	<-s.Done()
}
