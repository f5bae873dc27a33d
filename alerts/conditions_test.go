package alerts

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/watchdog"
)

// cond is a run of cycles as the condition policy sees them.
type cond struct {
	text       string // "" : absent
	incident   string // the open incident ("" : none)
	recovering bool
	n          int // cycles (default 1)
}

// flip is n cycles alternating text and nothing, starting with text.
func flip(text string, n int) []cond {
	var out []cond
	for i := range n {
		if i%2 == 0 {
			out = append(out, cond{text: text})
		} else {
			out = append(out, cond{})
		}
	}
	return out
}

func seq(parts ...any) []cond {
	var out []cond
	for _, p := range parts {
		switch p := p.(type) {
		case cond:
			out = append(out, p)
		case []cond:
			out = append(out, p...)
		}
	}
	return out
}

// playConditions feeds 5 s cycles of one topic to the policy and lists
// when it pages ("page@35s in inc-1").
func playConditions(p conditionPolicy, cycles []cond) []string {
	var (
		st  map[string]condition
		out []string
		at  = t0
	)
	for _, c := range cycles {
		for range max(c.n, 1) {
			cur := map[string]string{}
			if c.text != "" {
				cur["engine_odd"] = c.text
			}
			var page []string
			st, page = p.observe(st, at, cur, c.incident, c.recovering)
			for range page {
				s := fmt.Sprintf("page@%ds", int(at.Sub(t0).Seconds()))
				if c.incident != "" {
					s += " in " + c.incident
				}
				out = append(out, s)
			}
			at = at.Add(5 * time.Second)
		}
	}
	return out
}

func TestConditionPolicy(t *testing.T) {
	const odd = "ODD, NOT RESTARTING: /metrics answers 500"
	cases := []struct {
		name    string
		persist time.Duration // default 30s
		cycles  []cond
		want    []string
	}{
		{"a flaky /metrics on a healthy engine, 500 every other scrape for 130s, never pages", 0,
			flip(odd, 26), nil},
		{"a body cut short every third scrape never pages", 0,
			seq(cond{text: odd, n: 2}, cond{}, cond{text: odd, n: 2}, cond{}, cond{text: odd, n: 2}, cond{}, cond{text: odd, n: 2}, cond{}), nil},
		{"an odd endpoint that persists pages once it lasted persist_for", 0,
			[]cond{{text: odd, n: 20}}, []string{"page@30s"}},
		{"with no persistence time it still needs three cycles in a row", -1,
			seq(cond{text: odd, n: 2}, cond{}, cond{text: odd, n: 3}), []string{"page@25s"}},
		{"once paged, flapping is the same episode", 0,
			seq(cond{text: odd, n: 8}, flip(odd, 20), cond{text: odd, n: 10}), []string{"page@30s"}},
		{"gone for as long as it took to page, it may page again", 0,
			seq(cond{text: odd, n: 8}, cond{n: 8}, cond{text: odd, n: 8}), []string{"page@30s", "page@110s"}},
		{"never twice in one incident", 0,
			seq(cond{text: odd, incident: "inc-1", n: 8}, cond{incident: "inc-1", n: 8}, cond{text: odd, incident: "inc-1", n: 8}), []string{"page@30s in inc-1"}},
		{"a new incident may page it again after it went away", 0,
			seq(cond{text: odd, incident: "inc-1", n: 8}, cond{n: 8}, cond{text: odd, incident: "inc-2", n: 8}), []string{"page@30s in inc-1", "page@110s in inc-2"}},
		{"vigil's own restart of the engine never pages it", 0,
			[]cond{{text: "ODD, NOT RESTARTING: /v1/models answers refused", incident: "inc-1", recovering: true, n: 40}}, nil},
		{"after the restart the run starts again", 0,
			seq(cond{text: odd, incident: "inc-1", recovering: true, n: 10}, cond{text: odd, incident: "inc-1", n: 8}), []string{"page@80s in inc-1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := conditionPolicy{PersistFor: 30 * time.Second}
			if tc.persist < 0 {
				p.PersistFor = 0
			}
			got := playConditions(p, tc.cycles)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("pages %v, want %v", got, tc.want)
			}
		})
	}
}

// The pager side of the table: a flaky scrape pages nothing, a lasting
// odd endpoint pages once, in the open incident's thread.
func TestConditionsPageOnceInTheIncidentsThread(t *testing.T) {
	fs := newFakeSlack(t)
	clk, sl := newClock(), &sleeps{}
	o := testOptions(clk, sl)
	o.UnknownAfter = time.Minute
	p := newTestPager(t, newSlackNotifier(t, fs, false), o)
	runPager(t, p)

	missing := "engine metrics missing from /metrics: vllm:num_requests_waiting (check engine.metrics)"
	// 90 s of a body cut at a line boundary every other scrape (6 s
	// cycles): 15 cuts, each missing a family.
	for range 15 {
		p.Conditions(clk.Now(), map[string]string{"metrics_missing": missing}, false)
		clk.Advance(3 * time.Second)
		p.Conditions(clk.Now(), nil, false)
		clk.Advance(3 * time.Second)
	}
	flush(t, p)
	if got := fs.posts(); len(got) != 0 {
		t.Fatalf("a flaky scrape paged: %v", texts(got))
	}

	inc := &watchdog.Incident{ID: "inc-odd", Opened: clk.Now(), State: watchdog.StateSaturated, Peak: watchdog.StateSaturated}
	odd := "ODD, NOT RESTARTING: /v1/models answers 503 while counters move"
	for range 40 { // 10 minutes
		p.Observe(saturated(clk.Now(), 99), inc)
		p.Conditions(clk.Now(), map[string]string{"engine_odd": odd}, false)
		clk.Advance(15 * time.Second)
	}
	flush(t, p)
	posts := fs.posts()
	var odds []fakeReq
	for _, r := range posts {
		if strings.Contains(r.Form.Get("text"), "ODD") {
			odds = append(odds, r)
		}
	}
	if len(odds) != 1 {
		t.Fatalf("%d ODD pages, want 1: %v", len(odds), texts(posts))
	}
	if ts := headTS(p, "inc-odd"); ts == "" || odds[0].Form.Get("thread_ts") != ts {
		t.Errorf("the ODD page went to thread %q, want the incident's head %q", odds[0].Form.Get("thread_ts"), ts)
	}
	if got := odds[0].Form.Get("text"); !strings.HasPrefix(got, ":warning: node1: "+odd) {
		t.Errorf("ODD page = %q", got)
	}
}
