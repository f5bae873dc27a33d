package main

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

func TestEngineWhyReadsTheWatchdogsWallTimeAsEngineTime(t *testing.T) {
	// At scale 25 the 15 s floor is 600 ms of wall time and the prefill
	// rate 25 times the engine's.
	got := engineWhy("hang_after 600ms (auto, the floor): longest prefill in flight 2,985 tokens at 392,125 tok/s, history p99.9 gap 1.2s; x3 margin", 25)
	want := "hang_after 15s (auto, the floor): longest prefill in flight 2,985 tokens at 15,685 tok/s, history p99.9 gap 30s; x3 margin"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := engineWhy("hang_after 7.2s (auto, the ceiling): no sample yet", 25); got != "hang_after 3m00s (auto, the ceiling): no sample yet" {
		t.Errorf("ceiling: %q", got)
	}
}

func TestScaledDividesEveryWatchdogDuration(t *testing.T) {
	c := scaled(configs.Default(), 25)
	d := configs.Default()
	if c.Watchdog.Interval != d.Watchdog.Interval/25 || c.Watchdog.HangAfterMax != d.Watchdog.HangAfterMax/25 ||
		c.Watchdog.ProbeSLO != d.Watchdog.ProbeSLO/25 || c.Watchdog.RetryStorm.Window != d.Watchdog.RetryStorm.Window/25 ||
		c.Engine.RequestTimeout != d.Engine.RequestTimeout/25 || c.Alerts.UnknownAfter != d.Alerts.UnknownAfter/25 {
		t.Errorf("not scaled: %+v", c.Watchdog)
	}
	if c.Watchdog.SaturatedWaiting != d.Watchdog.SaturatedWaiting {
		t.Error("a count was scaled")
	}
}

func TestBodyIsSizedForTheLimitersEstimate(t *testing.T) {
	wl := workloads[1]
	c := wl.call(rand.New(rand.NewPCG(1, 2)))
	var b struct {
		Prompt string `json:"prompt"`
		Sim    struct {
			Prompt int `json:"prompt_tokens"`
		} `json:"vigil_sim"`
	}
	if err := json.Unmarshal(wl.body(c), &b); err != nil {
		t.Fatal(err)
	}
	// The limiter estimates (len(JSON prompt)+3)/4 tokens.
	if est := (len(b.Prompt) + 2 + 3) / 4; b.Sim.Prompt != c.Prompt || est < c.Prompt || est > c.Prompt+1 {
		t.Errorf("prompt %d tokens: text estimates %d, vigil_sim says %d", c.Prompt, est, b.Sim.Prompt)
	}
}

func TestReportPrintsBothTablesAndTheRatio(t *testing.T) {
	h := func(took, win time.Duration) hangResult {
		return hangResult{detected: true, took: took * time.Second, window: win * time.Second, why: "hang_after 15s (auto, the floor): x"}
	}
	l := &longResult{duration: 20 * time.Minute, verdictTally: verdictTally{verdicts: 80}, windows: []windowSeen{
		{15 * time.Second, "a"}, {15 * time.Second, "b"}, {18 * time.Second, "c"}}}
	r := &report{scale: 25, workloads: []workloadResult{{name: "chat", arms: []armResult{{
		arm:   arm{name: "light", target: 30 * time.Second},
		auto:  []hangResult{h(20, 15), h(25, 15), {}},
		fixed: []hangResult{h(190, 180), h(185, 180), h(181, 180)}}}, long: l}},
		battery: []batteryResult{{name: "sleep", verdictTally: verdictTally{verdicts: 40, hung: 1}, longest: windowSeen{3 * time.Minute, "why"}}}, batteryWorkload: "chat"}
	var buf bytes.Buffer
	r.print(&buf)
	out := buf.String()
	for _, want := range []string{"| chat     | light |", " 20.0, 25.0, - |", "30s: NOT MET", "15.0 / 15.0 / 18.0", "at the median: b",
		"1 HUNG in all", "| sleep "} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	r.workloads[0].arms[0].auto[2] = h(29, 15)
	buf.Reset()
	r.print(&buf)
	if out := buf.String(); !strings.Contains(out, "0.14x") || !strings.Contains(out, "30s: MET |") || strings.Contains(out, "NOT MET") {
		t.Errorf("want the median ratio 25/185 and MET:\n%s", out)
	}
}
