package probes

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/configs"
)

// The three fixtures are one engine state (12 waiting, 16 running, 1.65M
// prompt and 48,210 generation tokens, 201 finished requests) written the
// way each engine writes it: vLLM's and SGLang's Python client (labels,
// _created gauges, Python floats), llama.cpp's server (no labels, C++
// stream formatting of doubles, so 1650000 reads 1.65e+06).
var profileFixtures = []struct {
	kind      string
	file      string
	heartbeat string
	// e2eCount is the finished requests Little's law reads; -1 when the
	// engine has no latency histogram.
	e2eCount float64
}{
	{configs.KindVLLM, "testdata/profile-vllm.txt", "vllm:iteration_tokens_total_count", 201},
	{configs.KindSGLang, "testdata/profile-sglang.txt", "sglang:num_requests_total", 201},
	{configs.KindLlamaCpp, "testdata/profile-llamacpp.txt", "llamacpp:n_decode_total", -1},
}

func engineFor(kind string) configs.Engine {
	e := configs.Default().Engine
	e.Kind = kind
	return e
}

func checkSameState(t *testing.T, m *Metrics, heartbeat string, e2eCount float64) {
	t.Helper()
	checks := []struct {
		name      string
		got, want float64
	}{
		{"waiting", m.Waiting, 12},
		{"running", m.Running, 16},
		{"progress total", m.ProgressTotal(), 1650000 + 48210},
		{"extra: prompt tokens", m.Extra[MetricPromptTokens], 1650000},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	if v, ok := m.Heartbeats[heartbeat]; !ok || v <= 0 {
		t.Errorf("heartbeat %s = %v, %v", heartbeat, v, ok)
	}
	if v, ok := m.Extra[MetricE2ELatencyCount]; e2eCount < 0 && ok || e2eCount >= 0 && v != e2eCount {
		t.Errorf("extra: e2e latency count = %v, %v; want %v", v, ok, e2eCount)
	}
}

func TestEachEngineScrapeParsesToTheSameSample(t *testing.T) {
	for _, f := range profileFixtures {
		t.Run(f.kind, func(t *testing.T) {
			body, err := os.ReadFile(f.file)
			if err != nil {
				t.Fatal(err)
			}
			names := engineFor(f.kind).MetricsFor(f.kind)
			m, missing, err := ParseMetrics(bytes.NewReader(body), names)
			if err != nil {
				t.Fatal(err)
			}
			if len(missing) != 0 {
				t.Errorf("missing %v", missing)
			}
			checkSameState(t, &m, f.heartbeat, f.e2eCount)
		})
	}
}

func serveFile(t *testing.T, path string) *httptest.Server {
	t.Helper()
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

func TestAutoPicksEachEngineFromItsFirstScrape(t *testing.T) {
	for _, f := range profileFixtures {
		t.Run(f.kind, func(t *testing.T) {
			s := serveFile(t, f.file)
			e := engineFor(configs.KindAuto)
			e.URL = s.URL
			c := NewClient(FromConfig(e, configs.Default().Watchdog))
			defer c.Close()
			if got := c.Kind(); got != "" {
				t.Fatalf("kind before any scrape = %q", got)
			}
			obs := c.Metrics(context.Background())
			if !obs.Readable() {
				t.Fatalf("scrape unreadable: %s", obs.Error)
			}
			if obs.Kind != f.kind || c.Kind() != f.kind {
				t.Errorf("kind = %q (client %q), want %q", obs.Kind, c.Kind(), f.kind)
			}
			checkSameState(t, obs.Metrics, f.heartbeat, f.e2eCount)

			kind, fams, err := DetectEngine(context.Background(), Target{URL: s.URL})
			if err != nil || kind != f.kind || len(fams) == 0 {
				t.Errorf("DetectEngine = %q, %d families, %v", kind, len(fams), err)
			}
		})
	}
}

func TestAKindStaysOnceAScrapeShowedIt(t *testing.T) {
	body := map[string][]byte{}
	for _, f := range profileFixtures {
		b, err := os.ReadFile(f.file)
		if err != nil {
			t.Fatal(err)
		}
		body[f.kind] = b
	}
	serving := configs.KindSGLang
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body[serving]) }))
	defer s.Close()
	e := engineFor(configs.KindAuto)
	e.URL = s.URL
	c := NewClient(FromConfig(e, configs.Default().Watchdog))
	defer c.Close()
	if obs := c.Metrics(context.Background()); obs.Kind != configs.KindSGLang {
		t.Fatalf("first scrape kind %q", obs.Kind)
	}
	// Another engine behind the same port is a misconfiguration to see,
	// not a reason to read it silently by other names.
	serving = configs.KindLlamaCpp
	obs := c.Metrics(context.Background())
	if obs.Readable() || obs.Kind != configs.KindSGLang || !strings.Contains(obs.Error, "missing sglang:num_queue_reqs") {
		t.Errorf("after the engine changed: kind %q, error %q", obs.Kind, obs.Error)
	}
}

func TestAnUnknownEngineScrapeNamesTheFamiliesItHas(t *testing.T) {
	tgi := "# TYPE tgi_queue_size gauge\ntgi_queue_size 3\n# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 8\n" +
		"# TYPE tgi_request_count counter\ntgi_request_count 120\n"
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(tgi)) }))
	defer s.Close()
	e := engineFor(configs.KindAuto)
	e.URL = s.URL
	c := NewClient(FromConfig(e, configs.Default().Watchdog))
	defer c.Close()
	obs := c.Metrics(context.Background())
	if obs.Readable() || obs.Kind != "" || c.Kind() != "" {
		t.Fatalf("unknown engine read as %q: %+v", obs.Kind, obs.Metrics)
	}
	want := []string{"tgi_batch_current_size", "tgi_queue_size", "tgi_request_count"}
	if !slices.Equal(obs.Families, want) {
		t.Errorf("families = %q, want %q", obs.Families, want)
	}
	if !strings.Contains(obs.Error, "the scrape has 3 families: tgi_batch_current_size, tgi_queue_size, tgi_request_count") {
		t.Errorf("error = %q", obs.Error)
	}
	_, fams, err := DetectEngine(context.Background(), Target{URL: s.URL})
	if !errors.Is(err, ErrUnknownEngine) || !slices.Equal(fams, want) {
		t.Errorf("DetectEngine: %v, %q", err, fams)
	}
}
