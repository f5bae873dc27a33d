package daemon

import (
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/internal/testinfra/simengine"
)

func TestRunSaysTheEngineKindAtStartUp(t *testing.T) {
	for _, tc := range []struct {
		name  string
		url   func(t *testing.T) string
		words string
	}{
		{"an SGLang engine answering", func(t *testing.T) string {
			return simengine.Start(t, func(c *enginesim.Config) { c.Metrics = enginesim.MetricsSGLang }).URL()
		}, "engine kind: sglang (engine.kind auto: picked from the metric families of the first scrape)"},
		{"no engine yet", func(t *testing.T) string { return "http://" + testinfra.FreeAddr(t) },
			"engine kind: not known yet (engine.kind auto: metrics: refused; the first readable scrape will decide"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			td := startDaemon(t, testinfra.DaemonConfig(t, tc.url(t)))
			if logs := td.logs.String(); !strings.Contains(logs, tc.words) {
				t.Errorf("the start-up log lacks %q:\n%s", tc.words, logs)
			}
		})
	}
}
