package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/internal/testinfra/simengine"
)

// Retries that reach a node which never ran their call (a round-robin load
// balancer) show in /status, /metrics and diagnose, and page once.
func TestRetriesThatMissTheirExecutionPageOnce(t *testing.T) {
	s := simengine.Start(t, nil)
	td := startDaemon(t, testinfra.DaemonConfig(t, s.URL()))
	send := func(key string, retry int) {
		req, _ := testinfra.NewJSONPost(context.Background(), td.proxyURL+"/v1/completions", `{"prompt":"hi","max_tokens":2}`)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("X-Stainless-Retry-Count", fmt.Sprint(retry))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		testinfra.Drain(resp)
	}
	// Ten calls whose retries come back here find their result...
	for i := range 10 {
		send(fmt.Sprintf("home-%d", i), 0)
		send(fmt.Sprintf("home-%d", i), 1)
	}
	// ...thirty whose first attempt ran on another member find nothing.
	for i := range 30 {
		send(fmt.Sprintf("away-%d", i), 1)
	}

	var st struct {
		Routing struct {
			Retries uint64   `json:"keyed_retries"`
			Found   uint64   `json:"found"`
			Share   *float64 `json:"share"`
			Low     bool     `json:"low"`
		} `json:"routing"`
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := json.Unmarshal([]byte(getBody(t, td.statusURL+"/status")), &st); err != nil {
			t.Fatal(err)
		}
		if st.Routing.Retries == 40 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st.Routing.Retries != 40 || st.Routing.Found != 10 || st.Routing.Share == nil || *st.Routing.Share != 0.25 || !st.Routing.Low {
		t.Fatalf("/status routing %+v (share %v), want 10 of 40 found, low", st.Routing, st.Routing.Share)
	}
	metrics := getBody(t, td.statusURL+"/metrics")
	for _, want := range []string{
		"vigil_pool_keyed_retry_found_share 0.25", "vigil_pool_routing_not_affine 1",
		`vigil_admission_keyed_retries_total{found="false"} 30`, `vigil_admission_keyed_retries_total{found="true"} 10`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// A few more intervals of the same: still one page.
	time.Sleep(600 * time.Millisecond)
	pages := 0
	for line := range strings.Lines(td.logs.String()) {
		if strings.Contains(line, "page=notice") && strings.Contains(line, "ROUTING NOT KEY-AFFINE") {
			pages++
		}
	}
	if pages != 1 {
		t.Errorf("%d routing pages sent, want 1:\n%s", pages, td.logs.String())
	}

	code, out, errOut := vigil(t, "diagnose", "--config", td.cfgPath, "--window", "400ms", "--interval", "200ms")
	if !strings.Contains(out, "routing: 25% of keyed retries found their execution here (10 of 40") ||
		!strings.Contains(out, "NOT KEY-AFFINE") {
		t.Errorf("diagnose (exit %d) lacks the routing line:\n%s\n%s", code, out, errOut)
	}
}
