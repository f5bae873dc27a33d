package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/enginesim"

	"github.com/vigil-dev/vigil/internal/testinfra/simengine"
)

func TestDiagnoseSaysWhichEngineKindAutoPicked(t *testing.T) {
	for _, names := range []string{enginesim.MetricsVLLM, enginesim.MetricsSGLang, enginesim.MetricsLlamaCpp} {
		t.Run(names, func(t *testing.T) {
			t.Parallel()
			s := simengine.Start(t, func(c *enginesim.Config) { c.Metrics = names })
			code, out, errOut := vigil(t, "diagnose", "--engine", s.URL(), "--json", "--window", "500ms", "--interval", "250ms")
			var got struct {
				State  string `json:"state"`
				Kind   string `json:"engine_kind"`
				Reason string `json:"engine_kind_reason"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("not one JSON object: %v\n%s\n%s", err, out, errOut)
			}
			if got.Kind != names || !strings.Contains(got.Reason, "engine.kind auto: picked from the metric families") {
				t.Errorf("engine kind %q (%s), want %s", got.Kind, got.Reason, names)
			}
			if got.State != "healthy" || code != 0 {
				t.Errorf("an idle %s engine is %q (exit %d)", names, got.State, code)
			}
		})
	}
}

func TestDiagnoseOfAnUnknownEngineNamesTheFamiliesItSaw(t *testing.T) {
	tgi := "# TYPE tgi_queue_size gauge\ntgi_queue_size 3\n# TYPE tgi_request_count counter\ntgi_request_count 120\n"
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			w.Write([]byte(tgi))
			return
		}
		w.WriteHeader(http.StatusOK)
		w.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model"}]}`))
	}))
	defer s.Close()
	_, out, _ := vigil(t, "diagnose", "--engine", s.URL, "--json", "--window", "250ms", "--interval", "250ms")
	var got struct {
		Kind     string   `json:"engine_kind"`
		Reason   string   `json:"engine_kind_reason"`
		Families []string `json:"metric_families"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	if got.Kind != "" || !slices.Equal(got.Families, []string{"tgi_queue_size", "tgi_request_count"}) ||
		!strings.Contains(got.Reason, "no known engine's metrics") || !strings.Contains(got.Reason, "tgi_queue_size, tgi_request_count") {
		t.Errorf("kind %q, families %q, reason %q", got.Kind, got.Families, got.Reason)
	}
	_, text, _ := vigil(t, "diagnose", "--engine", s.URL, "--window", "250ms", "--interval", "250ms")
	if !strings.Contains(text, "Engine kind\n  unknown (engine.kind auto:") || !strings.Contains(text, "tgi_request_count") {
		t.Errorf("text lacks the engine kind and families:\n%s", text)
	}
}
