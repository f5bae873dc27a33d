package probes

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/configs"
)

func vllmNames() configs.MetricNames { return configs.Default().Engine.Metrics }

func fixture(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/vllm-v1-metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTheFixtureScrapeReadsAsTheRealEngineReported(t *testing.T) {
	t.Parallel()
	m, missing, err := ParseMetrics(bytes.NewReader(fixture(t)), vllmNames())
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) != 0 {
		t.Errorf("missing %v", missing)
	}
	checks := []struct {
		name      string
		got, want float64
	}{
		{"waiting", m.Waiting, 0},
		{"running", m.Running, 0},
		{"prompt tokens", m.Progress["vllm:prompt_tokens_total"], 2424921},
		{"generation tokens", m.Progress["vllm:generation_tokens_total"], 60300},
		{"progress total", m.ProgressTotal(), 2424921 + 60300},
		{"iteration count (a histogram's _count)", m.Heartbeats["vllm:iteration_tokens_total_count"], 3196},
		{"prefix cache queries", m.Heartbeats["vllm:prefix_cache_queries_total"], 2424921},
		{"request success summed over finished_reason", m.Heartbeats["vllm:request_success_total"], 201},
		{"extra: prompt tokens", m.Extra[MetricPromptTokens], 2424921},
		{"extra: prefix cache queries", m.Extra[MetricPrefixCacheQueries], 2424921},
		{"extra: request success", m.Extra[MetricRequestSuccess], 201},
		{"extra: e2e latency count", m.Extra[MetricE2ELatencyCount], 201},
		{"extra: e2e latency sum", m.Extra[MetricE2ELatencySum], 84.81637237899997},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

const twoEngines = `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3
vllm:num_requests_waiting{engine="1",model_name="m"} 4
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 500
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 8
vllm:num_requests_running{engine="1",model_name="m"} 8
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 1000
vllm:prompt_tokens_total{engine="1",model_name="m"} 2000
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="m"} 1.7e+09
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 10
vllm:generation_tokens_total{engine="1",model_name="m"} 20
`

func TestParseMetrics(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		body     string
		names    func(*configs.MetricNames)
		wantErr  string
		waiting  float64
		running  float64
		progress float64
		missing  []string
	}{
		{
			name: "data-parallel engines are summed, by-reason and _created are ignored",
			body: twoEngines, waiting: 7, running: 16, progress: 3030,
			missing: []string{"vllm:iteration_tokens_total_count", "vllm:prefix_cache_queries_total", "vllm:request_success_total", "vllm:time_to_first_token_seconds_count"},
		},
		{
			name: "a missing heartbeat is reported but the scrape is readable",
			body: twoEngines, names: func(n *configs.MetricNames) { n.Heartbeats = []string{"vllm:nope_total"} },
			waiting: 7, running: 16, progress: 3030, missing: []string{"vllm:nope_total", "vllm:time_to_first_token_seconds_count", "vllm:request_success_total"},
		},
		{
			name:    "a missing waiting gauge makes the scrape unreadable",
			body:    strings.Replace(twoEngines, "vllm:num_requests_waiting{", "vllm:num_requests_queued{", -1),
			wantErr: "missing vllm:num_requests_waiting",
		},
		{
			name:    "a missing progress counter makes the scrape unreadable",
			body:    twoEngines,
			names:   func(n *configs.MetricNames) { n.Progress = append(n.Progress, "vllm:other_tokens_total") },
			wantErr: "missing vllm:other_tokens_total",
		},
		{name: "an empty body is unreadable, never zeros", body: "", wantErr: "empty body"},
		{name: "whitespace only is unreadable", body: "\n\n  \n", wantErr: "empty body"},
		{name: "an HTML error page is unreadable", body: "<!DOCTYPE html><html><body>502 Bad Gateway</body></html>", wantErr: "HTML"},
		{name: "a line cut in the middle is unreadable", body: twoEngines + `vllm:generation_tokens_total{engine="2",model`, wantErr: "parse"},
		{name: "garbage is unreadable", body: "hello world\nthis is not a scrape\n", wantErr: "parse"},
		{name: "only comments is unreadable", body: "# HELP x y\n# just a comment\n", wantErr: "no samples"},
		{
			name:    "a NaN counter is unreadable",
			body:    strings.Replace(twoEngines, `vllm:prompt_tokens_total{engine="1",model_name="m"} 2000`, `vllm:prompt_tokens_total{engine="1",model_name="m"} NaN`, 1),
			wantErr: "non-finite",
		},
		{
			name:    "untyped samples are read too",
			body:    "vllm:num_requests_waiting 2\nvllm:num_requests_running 1\nvllm:prompt_tokens_total 5\nvllm:generation_tokens_total 6\n",
			waiting: 2, running: 1, progress: 11,
			missing: []string{"vllm:iteration_tokens_total_count", "vllm:prefix_cache_queries_total", "vllm:request_success_total", "vllm:time_to_first_token_seconds_count"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			names := vllmNames()
			if tc.names != nil {
				tc.names(&names)
			}
			m, missing, err := ParseMetrics(strings.NewReader(tc.body), names)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				if m.Progress != nil || m.Waiting != 0 {
					t.Fatalf("an unreadable scrape returned values: %+v", m)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Waiting != tc.waiting || m.Running != tc.running || m.ProgressTotal() != tc.progress {
				t.Errorf("waiting %v running %v progress %v, want %v %v %v", m.Waiting, m.Running, m.ProgressTotal(), tc.waiting, tc.running, tc.progress)
			}
			if !slices.Equal(missing, tc.missing) {
				t.Errorf("missing %v, want %v", missing, tc.missing)
			}
		})
	}
}

const twoRanksWithDecode = twoEngines + `# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="m"} 50
vllm:iteration_tokens_total_count{engine="0",model_name="m"} 50
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 1010
vllm:iteration_tokens_total_bucket{engine="1",le="+Inf",model_name="m"} 70
vllm:iteration_tokens_total_count{engine="1",model_name="m"} 70
vllm:iteration_tokens_total_sum{engine="1",model_name="m"} 2020
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 4
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.5
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 6
vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 6
vllm:time_to_first_token_seconds_sum{engine="1",model_name="m"} 2.5
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 2
vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 5
vllm:request_success_total{engine="1",finished_reason="length",model_name="m"} 3
`

// The per-rank split and the decode counters: what the watchdog needs to
// see one hung rank behind a moving sum, and a decode stall behind moving
// token counters.
func TestParseMetricsRanksAndDecode(t *testing.T) {
	t.Parallel()
	m, _, err := ParseMetrics(strings.NewReader(twoRanksWithDecode), vllmNames())
	if err != nil {
		t.Fatal(err)
	}
	if m.Decode == nil {
		t.Fatal("no decode counters")
	}
	if got := *m.Decode; got.FirstTokens != 10 || got.Generation != 30 || got.Finished != 5 {
		t.Errorf("decode %+v, want first 10, generation 30, finished 5 (the 5 aborted left out)", got)
	}
	if got := *m.Decode; got.Aborted != 5 || !got.AbortsKnown {
		t.Errorf("decode %+v, want the 5 aborted counted apart", got)
	}
	if got := m.Decode.DecodeTokens(); got != 20 {
		t.Errorf("decode tokens %v, want 20", got)
	}
	if len(m.Ranks) != 2 {
		t.Fatalf("ranks %v, want 2", m.Ranks)
	}
	r1 := m.Ranks["1"]
	if r1.Waiting != 4 || r1.Running != 8 || r1.Counters["vllm:prompt_tokens_total"] != 2000 ||
		r1.Counters["vllm:iteration_tokens_total_count"] != 70 || r1.Counters["vllm:request_success_total"] != 3 {
		t.Errorf("rank 1 %+v", r1)
	}
	if r0 := m.Ranks["0"]; r0.Counters["vllm:request_success_total"] != 7 {
		t.Errorf("rank 0 request_success %v, want 7 (every reason, as the heartbeat reads it)", r0.Counters["vllm:request_success_total"])
	}

	one, _, err := ParseMetrics(bytes.NewReader(fixture(t)), vllmNames())
	if err != nil {
		t.Fatal(err)
	}
	if one.Ranks != nil {
		t.Errorf("one engine has no per-rank split, got %v", one.Ranks)
	}
	if one.Decode == nil || one.Decode.FirstTokens != 201 {
		t.Errorf("fixture decode %+v, want 201 first tokens", one.Decode)
	}
	names := vllmNames()
	names.RankLabel = ""
	if off, _, _ := ParseMetrics(strings.NewReader(twoRanksWithDecode), names); off.Ranks != nil {
		t.Error("rank_label empty still split ranks")
	}
}

func TestScrape(t *testing.T) {
	t.Parallel()
	good := fixture(t)
	cases := []struct {
		name     string
		handler  http.HandlerFunc
		readable bool
		class    ErrorClass
	}{
		{
			name: "a vLLM scrape is readable",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/plain; version=0.0.4")
				w.Write(good)
			},
			readable: true,
		},
		{
			name: "a scrape cut short by the server is unreadable",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Length", "100000")
				w.Write(good[:len(good)/2])
			},
			class: ClassReset,
		},
		{
			name: "an HTML page served as text/html is unreadable",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				w.Write([]byte("<html>login</html>"))
			},
			class: ClassOther,
		},
		{
			name:    "a 404 (metrics disabled) is unreadable",
			handler: func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) },
			class:   ClassHTTPStatus,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tc.handler)
			t.Cleanup(srv.Close)
			obs := Scrape(vllmNames())(context.Background(), Target{URL: srv.URL})
			if obs.Readable() != tc.readable || obs.Class != tc.class {
				t.Fatalf("readable %v class %q (%s), want %v %q", obs.Readable(), obs.Class, obs.Error, tc.readable, tc.class)
			}
			if !obs.Readable() && obs.Metrics != nil {
				t.Fatal("unreadable scrape carries metrics")
			}
		})
	}
}

// FuzzParseMetrics: whatever the network serves, the parser returns values
// or an error; it never panics, and never returns values with an error.
func FuzzParseMetrics(f *testing.F) {
	f.Add(fixture(f))
	f.Add([]byte(twoEngines))
	f.Add([]byte(""))
	f.Add([]byte("<html></html>"))
	f.Add(fixture(f)[:2000])
	names := vllmNames()
	f.Fuzz(func(t *testing.T, body []byte) {
		m, _, err := ParseMetrics(bytes.NewReader(body), names)
		if err != nil && (m.Progress != nil || m.Heartbeats != nil || m.Extra != nil) {
			t.Fatalf("values returned with error %v", err)
		}
		if err == nil && m.Progress == nil {
			t.Fatal("no error and no values")
		}
	})
}

// A body cut at a line boundary parses; a histogram cut before its _count
// line must read as missing, never as a count of zero (which the watchdog
// would take for an engine restart).
func TestAHistogramCutBeforeItsCountIsMissingNotZero(t *testing.T) {
	t.Parallel()
	full := string(fixture(t))
	cut := full[:strings.Index(full, "vllm:iteration_tokens_total_count{")]
	m, missing, err := ParseMetrics(strings.NewReader(cut), vllmNames())
	if err != nil {
		t.Fatalf("a body cut at a line boundary after the required families should parse: %v", err)
	}
	if v, ok := m.Heartbeats["vllm:iteration_tokens_total_count"]; ok {
		t.Errorf("the cut histogram's count read as %v; want it missing", v)
	}
	if !slices.Contains(missing, "vllm:iteration_tokens_total_count") {
		t.Errorf("missing = %v; want vllm:iteration_tokens_total_count named", missing)
	}
}
