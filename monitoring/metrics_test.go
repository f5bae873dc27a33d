package monitoring

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/vigil-dev/vigil/enginesim"
)

// synthetic are series Prometheus makes itself, not any target.
var synthetic = map[string]bool{"up": true}

// pending are metrics the rules use ahead of the code that exports them.
// Each entry must be absent from vigil's /metrics: once the metric lands,
// the test fails until the entry is removed, so the list cannot rot.
var pending = map[string]string{}

// targetLabels are attached by Prometheus's scrape config, not exported.
var targetLabels = map[string]bool{"job": true, "instance": true, "node": true}

// TestQueriedMetricsExist runs a real vigil (the binary built from this
// tree) against the simulated engine and checks that every metric the rules
// and the dashboard query, with every label value they match on, is in one
// of the two expositions.
func TestQueriedMetricsExist(t *testing.T) {
	exposed := scrapeVigilAndEngine(t)

	rules := readRules(t, "vigil-rules.yml")
	queries := map[string][]string{} // source -> expressions
	recorded := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			src := "vigil-rules.yml " + r.Alert + r.Record
			queries[src] = append(queries[src], r.Expr)
			if r.Record != "" {
				recorded[r.Record] = true
			}
			if r.Alert != "" && strings.TrimSpace(r.Annotations["runbook"]) == "" {
				t.Errorf("alert %s has no runbook annotation", r.Alert)
			}
		}
	}
	for src, exprs := range dashboardQueries(t, "grafana/vigil.json") {
		queries[src] = append(queries[src], exprs...)
	}

	used := 0
	for src, exprs := range queries {
		for _, expr := range exprs {
			refs, err := metricRefs(expr)
			if err != nil {
				t.Errorf("%s: %v", src, err)
				continue
			}
			for _, ref := range refs {
				used++
				switch {
				case recorded[ref.name], synthetic[ref.name]:
					continue
				case pending[ref.name] != "":
					if _, ok := exposed[ref.name]; ok {
						t.Errorf("%s is exported now: remove it from pending", ref.name)
					}
					continue
				}
				series, ok := exposed[ref.name]
				if !ok {
					t.Errorf("%s: %s is neither in vigil's /metrics nor in the engine's, nor a recording rule", src, ref.name)
					continue
				}
				for label, values := range ref.values {
					for _, v := range values {
						if !hasLabelValue(series, label, v) {
							t.Errorf("%s: no %s series has %s=%q (have %v)", src, ref.name, label, v, labelValues(series, label))
						}
					}
				}
			}
		}
	}
	// Guard against an extractor that silently finds nothing.
	if used < 40 {
		t.Errorf("only %d metric references found in the rules and dashboard; the extractor is broken", used)
	}
	for name := range pending {
		t.Logf("pending (not yet exported by this tree): %s: %s", name, pending[name])
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record      string            `yaml:"record"`
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T, path string) ruleFile {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(f.Groups) == 0 {
		t.Fatalf("%s: no rule groups", path)
	}
	return f
}

// dashboardQueries returns every PromQL expression in the dashboard:
// panel targets, annotations and template variable queries.
func dashboardQueries(t *testing.T, path string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Annotations struct {
			List []struct {
				Name string `json:"name"`
				Expr string `json:"expr"`
			} `json:"list"`
		} `json:"annotations"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string][]string{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", path, p.Title)
		}
		for _, tg := range p.Targets {
			out["panel "+p.Title] = append(out["panel "+p.Title], tg.Expr)
		}
	}
	for _, a := range dash.Annotations.List {
		out["annotation "+a.Name] = append(out["annotation "+a.Name], a.Expr)
	}
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		s, _ := q["query"].(string)
		// label_values(SELECTOR, LABEL): the label is not a metric.
		if m := labelValuesRE.FindStringSubmatch(s); m != nil {
			s = m[1]
		}
		out["variable "+v.Name] = append(out["variable "+v.Name], s)
	}
	return out
}

var labelValuesRE = regexp.MustCompile(`^label_values\((.*),\s*[a-zA-Z_]+\)$`)

// ref is one metric an expression selects, with the label values its
// equality and simple alternation matchers require.
type ref struct {
	name   string
	values map[string][]string
}

var (
	selectorRE = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}`)
	matcherRE  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	groupingRE = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	rangeRE    = regexp.MustCompile(`\[[^\]]*\]`)
	stringRE   = regexp.MustCompile(`"[^"]*"`)
	identRE    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	numberRE   = regexp.MustCompile(`\b\d+(\.\d+)?([eE][-+]?\d+)?[smhdwy]?\b`)
	literalAlt = regexp.MustCompile(`^[a-zA-Z0-9_]+(\|[a-zA-Z0-9_]+)*$`)
)

// promqlWords are PromQL's functions, aggregations and keywords the rules
// and dashboard use. An identifier that is none of these is a metric name.
var promqlWords = map[string]bool{
	"sum": true, "max": true, "min": true, "avg": true, "count": true, "rate": true, "increase": true,
	"irate": true, "absent": true, "changes": true, "min_over_time": true, "max_over_time": true,
	"avg_over_time": true, "histogram_quantile": true, "label_replace": true, "clamp_min": true,
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "topk": true, "bottomk": true,
}

// metricRefs finds the metric names in a PromQL expression and the label
// values it matches them on. It is not a PromQL parser, but it knows the
// forms these files use, and fails on an identifier it cannot place.
func metricRefs(expr string) ([]ref, error) {
	var refs []ref
	rest := selectorRE.ReplaceAllStringFunc(expr, func(sel string) string {
		m := selectorRE.FindStringSubmatch(sel)
		r := ref{name: m[1], values: map[string][]string{}}
		for _, mm := range matcherRE.FindAllStringSubmatch(m[2], -1) {
			label, op, val := mm[1], mm[2], mm[3]
			if targetLabels[label] || label == "__name__" || strings.Contains(val, "$") {
				continue
			}
			switch {
			case op == "=":
				r.values[label] = append(r.values[label], val)
			case op == "=~" && literalAlt.MatchString(val):
				r.values[label] = append(r.values[label], strings.Split(val, "|")...)
			}
		}
		if r.name != "" {
			refs = append(refs, r)
		}
		return " "
	})
	rest = groupingRE.ReplaceAllString(rest, " ")
	rest = rangeRE.ReplaceAllString(rest, " ")
	rest = stringRE.ReplaceAllString(rest, " ")
	rest = numberRE.ReplaceAllString(rest, " ")
	for _, id := range identRE.FindAllString(rest, -1) {
		if promqlWords[id] {
			continue
		}
		refs = append(refs, ref{name: id})
	}
	for _, r := range refs {
		if !strings.HasPrefix(r.name, "vigil_") && !strings.HasPrefix(r.name, "vllm:") &&
			!strings.HasPrefix(r.name, "node:") && !synthetic[r.name] {
			return nil, fmt.Errorf("cannot place %q in %q: not a vigil_, vllm: or node: recorded metric", r.name, expr)
		}
	}
	return refs, nil
}

func TestMetricRefs(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string // name or name{label=value,...}
	}{
		{`sum by (node) (rate(vllm:prompt_tokens_total{job="vllm"}[5m]))`, []string{"vllm:prompt_tokens_total"}},
		{`max by (node, state) (vigil_watchdog_state{job="vigil", state=~"hung|down"}) == 1`,
			[]string{"vigil_watchdog_state{state=hung,down}"}},
		{`node:a:rate5m / node:b:rate5m > 0.5 and node:b:rate5m > 333`, []string{"node:a:rate5m", "node:b:rate5m", "node:b:rate5m"}},
		{`increase(vigil_recovery_guard_refusals_total{guard="budget"}[15m]) > 0`,
			[]string{"vigil_recovery_guard_refusals_total{guard=budget}"}},
		{`absent(up{job="vigil"})`, []string{"up"}},
		{`sum(rate(vigil_admission_rejected_total{node=~"$node",reason=~"queue_.*"}[$__rate_interval]))`,
			[]string{"vigil_admission_rejected_total"}},
		{`(x{state="a"} == 1) * 2 or (x{state="b"} == 1) * 3`, nil}, // x is no vigil metric: an error
	} {
		refs, err := metricRefs(tc.expr)
		if tc.want == nil {
			if err == nil {
				t.Errorf("metricRefs(%q) = %v, want an error", tc.expr, refs)
			}
			continue
		}
		if err != nil {
			t.Errorf("metricRefs(%q): %v", tc.expr, err)
			continue
		}
		var got []string
		for _, r := range refs {
			s := r.name
			for l, vs := range r.values {
				s += "{" + l + "=" + strings.Join(vs, ",") + "}"
			}
			got = append(got, s)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("metricRefs(%q) = %v, want %v", tc.expr, got, tc.want)
		}
	}
}

// scrapeVigilAndEngine builds and starts vigil against a simulated engine
// and returns both expositions by metric name (histograms and summaries
// also under their _bucket, _sum and _count series names).
func scrapeVigilAndEngine(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sim, err := enginesim.Start(ctx, "127.0.0.1:0", enginesim.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })

	dir := t.TempDir()
	bin := filepath.Join(dir, "vigil")
	build := exec.Command("go", "build", "-o", bin, "github.com/vigil-dev/vigil/cmd/vigil")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	statusAddr, limiterAddr := freeAddr(t), freeAddr(t)
	cfg := fmt.Sprintf(`node: metrics-test
engine:
  url: %s
watchdog:
  interval: 200ms
  state_file: %s
admission:
  listen: %s
status:
  listen: %s
`, sim.URL(), filepath.Join(dir, "state.json"), limiterAddr, statusAddr)
	cfgPath := filepath.Join(dir, "vigil.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	run := exec.CommandContext(ctx, bin, "run", "--config", cfgPath)
	run.Stdout, run.Stderr = &log, &log
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = run.Wait()
		if t.Failed() {
			t.Logf("vigil's log:\n%s", log.String())
		}
	})

	out := map[string]*dto.MetricFamily{}
	deadline := time.Now().Add(20 * time.Second)
	for {
		fams, err := scrape("http://" + statusAddr + "/metrics")
		if err == nil && fams["vigil_watchdog_cycles_total"] != nil &&
			fams["vigil_watchdog_cycles_total"].GetMetric()[0].GetCounter().GetValue() >= 2 {
			addFamilies(out, fams)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("vigil's /metrics on %s never showed two cycles (last error: %v)", statusAddr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	fams, err := scrape(sim.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	addFamilies(out, fams)
	return out
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func scrape(url string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

func addFamilies(out, fams map[string]*dto.MetricFamily) {
	for name, f := range fams {
		out[name] = f
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			out[name+"_bucket"], out[name+"_sum"], out[name+"_count"] = f, f, f
		case dto.MetricType_SUMMARY:
			out[name+"_sum"], out[name+"_count"] = f, f
		}
	}
}

func hasLabelValue(f *dto.MetricFamily, label, value string) bool {
	return slices.Contains(labelValues(f, label), value)
}

func labelValues(f *dto.MetricFamily, label string) []string {
	var vs []string
	for _, m := range f.GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label && !slices.Contains(vs, lp.GetValue()) {
				vs = append(vs, lp.GetValue())
			}
		}
	}
	return vs
}
