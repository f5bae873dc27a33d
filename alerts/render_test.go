package alerts

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/watchdog"
)

var t0 = time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)

func saturated(at time.Time, waiting float64) watchdog.Verdict {
	return watchdog.Verdict{
		State:  watchdog.StateSaturated,
		Reason: "progress moving with 99 waiting (saturated_waiting 8)",
		At:     at,
		Evidence: watchdog.Evidence{
			Window: 15 * time.Second, Samples: 2,
			Waiting: waiting, Running: 8,
			ProgressDelta: 35100, TokensPerSec: 2340,
			HeartbeatDeltas: map[string]float64{"vllm:iteration_tokens_total_count": 120},
			Models:          "200 in 3ms", Health: "200 in 1ms",
			Probe: "200 in 12.4s", ProbeLatency: 12400 * time.Millisecond,
			CompletionsPerSec: 0.275, DrainEstimate: 6 * time.Minute,
		},
	}
}

// shedding is v with the limiter's counts of the last cycles: the share
// of calls it answered 429/503, of how many, and its queue.
func shedding(v watchdog.Verdict, rate float64, calls uint64, queued int) watchdog.Verdict {
	v.Evidence.ShedRate, v.Evidence.ShedCalls, v.Evidence.LimiterQueued = rate, calls, queued
	return v
}

func hung(at time.Time) watchdog.Verdict {
	return watchdog.Verdict{
		State:  watchdog.StateHung,
		Reason: "no progress signal moved for 3m05s with 48 pending",
		At:     at,
		Evidence: watchdog.Evidence{
			Window: 15 * time.Second, Samples: 2,
			Waiting: 40, Running: 8,
			SinceProgress: 185 * time.Second,
			Models:        "200 in 3ms", Health: "200 in 1ms",
			Probe: "outstanding for 95s",
		},
	}
}

func healthy(at time.Time) watchdog.Verdict {
	return watchdog.Verdict{
		State: watchdog.StateHealthy, Reason: "progress moving, probe OK", At: at,
		Evidence: watchdog.Evidence{
			Window: 15 * time.Second, Waiting: 2, Running: 4,
			ProgressDelta: 27750, TokensPerSec: 1850, Models: "200 in 2ms", Probe: "200 in 410ms",
		},
	}
}

func demoConfig() configs.Config {
	cfg := configs.Default()
	cfg.Node = "node1"
	cfg.Admission.Enabled = true
	cfg.LoadBalancer.Kind = "haproxy"
	cfg.LoadBalancer.HAProxy.Backend, cfg.LoadBalancer.HAProxy.Server = "vllm", "node1"
	cfg.Restart.Kind = "docker"
	cfg.Restart.Docker.Container = "vllm"
	return cfg
}

func demoRenderer() renderer {
	cfg := demoConfig()
	return renderer{node: cfg.Node, engineURL: displayURL(cfg.Engine.URL), plan: DescribeRecovery(cfg), drain: drainTarget(cfg.LoadBalancer), limiter: true}
}

// The two pages the README and doc.go show, byte for byte.
func TestHeadPagesRenderAsDocumented(t *testing.T) {
	r := demoRenderer()
	inc := &watchdog.Incident{ID: "inc-1", Opened: t0}
	cases := []struct {
		name string
		v    watchdog.Verdict
		want string
	}{
		{"a saturated engine is paged with its queue, throughput and a promise not to restart", shedding(saturated(t0, 99), 0.42, 310, 12),
			":large_orange_circle: SATURATED on node1 (http://127.0.0.1:8000): engine 99 waiting, 8 running, 2,340 tok/s, counters +35,100 in 15s; 12 queued in vigil's limiter; probe 200 in 12.4s; est. drain 6m. Not restarting: the engine is making progress. The limiter is shedding excess load: 42% of 310 calls answered 429/503 with Retry-After."},
		{"a hung engine is paged with how long it froze and what vigil will do", hung(t0),
			":red_circle: HUNG on node1 (http://127.0.0.1:8000): no progress for 3m05s with 40 waiting, 8 running; /v1/models 200 in 3ms; probe outstanding for 95s. Will drain vllm/node1 at HAProxy, restart container vllm, restore traffic gradually (10% → 100% over 2m)."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := r.head(tc.v, inc, nil)
			if m.Text != tc.want {
				t.Errorf("plain text\n got: %s\nwant: %s", m.Text, tc.want)
			}
			if !strings.Contains(docComment(t), tc.want) {
				t.Errorf("doc.go does not show this page as it renders:\n%s", tc.want)
			}
			readme, err := readFile("../README.md")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(readme, tc.want) {
				t.Errorf("README.md does not show this page as it renders:\n%s", tc.want)
			}
		})
	}
}

func docComment(t *testing.T) string {
	t.Helper()
	b, err := readFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHeadPageBlocksCarryHeaderEvidenceAndContext(t *testing.T) {
	m := demoRenderer().head(hung(t0), &watchdog.Incident{ID: "inc-7", Opened: t0}, nil)
	blocks := m.Blocks()
	if len(blocks) != 4 {
		t.Fatalf("want header, section, fields, context; got %d blocks", len(blocks))
	}
	h, ok := blocks[0].(*slack.HeaderBlock)
	if !ok || h.Text.Text != ":red_circle: HUNG on node1" {
		t.Errorf("header = %#v", blocks[0])
	}
	sec := blocks[1].(*slack.SectionBlock)
	if !strings.Contains(sec.Text.Text, "no progress for 3m05s") || !strings.Contains(sec.Text.Text, "Will drain vllm/node1 at HAProxy") {
		t.Errorf("section = %q", sec.Text.Text)
	}
	var names []string
	for _, f := range blocks[2].(*slack.SectionBlock).Fields {
		names = append(names, strings.SplitN(f.Text, "\n", 2)[0])
	}
	for _, want := range []string{"*Waiting / running*", "*No progress for*", "*/v1/models*", "*Probe*"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("fields %v lack %s", names, want)
		}
	}
	ctx := blocks[3].(*slack.ContextBlock)
	first := ctx.ContextElements.Elements[0].(*slack.TextBlockObject).Text
	if first != "node1 · http://127.0.0.1:8000 · incident inc-7 · verdict at 12:00:00 UTC" {
		t.Errorf("context = %q", first)
	}
	// Slack rejects blocks it cannot parse: they must be valid JSON.
	if _, err := json.Marshal(slack.Blocks{BlockSet: blocks}); err != nil {
		t.Fatal(err)
	}
}

func TestMrkdwnControlCharactersAreEscaped(t *testing.T) {
	v := hung(t0)
	v.State = watchdog.StateDown
	v.Reason = "connect <refused> & reset"
	m := demoRenderer().head(v, &watchdog.Incident{ID: "x"}, nil)
	sec := m.Blocks()[1].(*slack.SectionBlock)
	if strings.Contains(sec.Text.Text, "<refused>") || !strings.Contains(sec.Text.Text, "&lt;refused&gt; &amp; reset") {
		t.Errorf("section not escaped: %q", sec.Text.Text)
	}
}

func TestLatePagesSayHowLate(t *testing.T) {
	m := Message{Text: "x", At: t0, Delay: 27 * time.Minute}
	if got := m.Fallback(); got != "x [queued 12:00 UTC, sent 27m late]" {
		t.Errorf("Fallback = %q", got)
	}
	m.Delay = 10 * time.Second
	if m.Fallback() != "x" {
		t.Errorf("a page 10s late is on time: %q", m.Fallback())
	}
}

func TestEveryStateSaysWhatVigilWillAndWillNotDo(t *testing.T) {
	r := demoRenderer()
	cases := []struct {
		name  string
		state watchdog.State
		want  string
	}{
		{"saturated never restarts", watchdog.StateSaturated, "Not restarting: the engine is making progress"},
		{"hung drains and restarts", watchdog.StateHung, "Will drain vllm/node1 at HAProxy, restart container vllm"},
		{"down drains and restarts", watchdog.StateDown, "Will drain vllm/node1 at HAProxy, restart container vllm"},
		{"misconfigured never restarts", watchdog.StateMisconfigured, "Not restarting: a restart cannot fix authentication"},
		{"unknown never restarts", watchdog.StateUnknown, "Not restarting: vigil cannot tell saturated from hung"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := hung(t0)
			v.State = tc.state
			if m := r.head(v, &watchdog.Incident{ID: "i"}, nil); !strings.Contains(m.Text, tc.want) {
				t.Errorf("%s page lacks %q:\n%s", tc.state, tc.want, m.Text)
			}
		})
	}
}

func TestRecoveryStepsReadAsSentences(t *testing.T) {
	r := demoRenderer()
	at := t0
	cases := []struct {
		name string
		step recovery.Step
		want string
	}{
		{"a drain says where", recovery.Step{Name: recovery.StepDrain, OK: true, At: at, Detail: "haproxy vllm/node1 DRAIN, 3 sessions left after 15s"},
			":arrow_down: node1: drained at the load balancer: haproxy vllm/node1 DRAIN, 3 sessions left after 15s."},
		{"a restart says how many requests it aborted", recovery.Step{Name: recovery.StepRestart, OK: true, At: at, Detail: "container vllm restarted in 4s", Dropped: 12},
			":arrows_counterclockwise: node1: restarted the engine: container vllm restarted in 4s; aborted 12 in-flight requests."},
		{"a refused guard says why and when it lifts", recovery.Step{Name: recovery.StepGuardRefused, At: at, Detail: "cooldown: last restart 12m ago (cooldown 30m)", Until: at.Add(18 * time.Minute)},
			":no_entry: node1: not restarting: cooldown: last restart 12m ago (cooldown 30m). Lifts at 12:18 UTC (in 18m)."},
		{"a failed step says what failed and what happens next", recovery.Step{Name: recovery.StepFailed, At: at, Err: "haproxy: dial unix /run/haproxy/admin.sock: no such file", Detail: "staying undrained; not restarting an undrained host"},
			":x: node1: recovery step failed: haproxy: dial unix /run/haproxy/admin.sock: no such file. staying undrained; not restarting an undrained host."},
		{"a resolved recovery says what became of the calls cut from the engine", recovery.Step{Name: recovery.StepResolved, OK: true, At: at,
			Detail: "recovery took 41s, from its first action to the engine serving again",
			Calls:  &recovery.CallFate{MovedTo: map[string]int{"node2": 14}, Continued: 3, Lost: map[string]int{"n_gt_1": 1}}},
			":white_check_mark: node1: recovery finished: recovery took 41s, from its first action to the engine serving again. " +
				"14 in-flight requests moved to node2, 3 streams continued, 1 lost: n_gt_1 (1)."},
		{"held calls with none lost say so", recovery.Step{Name: recovery.StepResolved, OK: true, At: at, Detail: "recovered",
			Calls: &recovery.CallFate{Held: 6, Continued: 2}},
			":white_check_mark: node1: recovery finished: recovered. 6 held for the restarted engine, 2 streams continued, none lost."},
		{"held calls say how long they waited", recovery.Step{Name: recovery.StepResolved, OK: true, At: at, Detail: "recovered",
			Calls: &recovery.CallFate{Held: 88, HeldWaitMax: 25 * time.Second, MovedTo: map[string]int{"node2": 13}}},
			":white_check_mark: node1: recovery finished: recovered. 13 in-flight requests moved to node2, 88 held for the restarted engine (up to 25s), none lost."},
		{"calls refused while the engine was held are lost, never none lost", recovery.Step{Name: recovery.StepResolved, OK: true, At: at, Detail: "recovered",
			Calls: &recovery.CallFate{MovedTo: map[string]int{"node2": 13}, Continued: 3, Queued: 4, WaitP50: 2500 * time.Millisecond, WaitMax: 22 * time.Second,
				Refused: map[string]int{"stream_deadline": 20, "queue_timeout": 1}}},
			":white_check_mark: node1: recovery finished: recovered. 13 in-flight requests moved to node2, 3 streams continued, " +
				"4 new calls held in vigil's queue (wait p50 2.5s, max 22s), 21 lost: refused while held: queue_timeout (1), refused while held: stream_deadline (20)."},
		{"a dry run says it changed nothing", recovery.Step{Name: recovery.StepRestart, OK: true, At: at, DryRun: true, Detail: "would restart container vllm"},
			":arrows_counterclockwise: node1: [dry run] restarted the engine: would restart container vllm."},
		{"a step that failed on its own says so", recovery.Step{Name: recovery.StepWaitReady, At: at, Err: "not ready after 20m"},
			":x: node1: wait ready failed: not ready after 20m."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := r.step(tc.step).Text; got != tc.want {
				t.Errorf("\n got: %s\nwant: %s", got, tc.want)
			}
		})
	}
}

func TestDescribeRecoveryNamesWhatVigilWillAndWillNotDo(t *testing.T) {
	cases := []struct {
		name string
		edit func(*configs.Config)
		want string
	}{
		{"haproxy and docker", func(*configs.Config) {},
			"Will drain vllm/node1 at HAProxy, restart container vllm, restore traffic gradually (10% → 100% over 2m)."},
		{"no restarter means a human restarts", func(c *configs.Config) { c.Restart.Kind = "none" },
			"No restarter is configured (restart.kind none): vigil leaves the engine as it is. Will drain vllm/node1 at HAProxy and keep it out of rotation, then restore traffic gradually (10% → 100% over 2m) once the engine serves again. To recover, restart the engine by hand (or set restart.kind); this incident resolves once it serves again."},
		{"neither restarter nor load balancer", func(c *configs.Config) { c.Restart.Kind, c.LoadBalancer.Kind = "none", "none" },
			"No restarter is configured (restart.kind none): vigil leaves the engine as it is. No load balancer is configured either, so the host still takes traffic. To recover, restart the engine by hand (or set restart.kind); this incident resolves once it serves again."},
		{"no drainer says requests are lost", func(c *configs.Config) {
			c.LoadBalancer.Kind = "none"
			c.Restart.Kind, c.Restart.Systemd.Unit = "systemd", "vllm.service"
			c.Admission.Enabled = false
		}, "Will restart unit vllm.service. No load balancer is configured (load_balancer.kind none), so requests in flight are lost."},
		{"no drainer with the limiter says what it holds and what is lost", func(c *configs.Config) {
			c.LoadBalancer.Kind = "none"
			c.Restart.Kind, c.Restart.Systemd.Unit = "systemd", "vllm.service"
		}, "Will restart unit vllm.service. No load balancer is configured (load_balancer.kind none): calls through vigil's limiter are held for the restarted engine or moved to a peer; calls sent straight to the engine are lost."},
		{"a dry run changes nothing", func(c *configs.Config) { c.Watchdog.DryRun = true },
			"Dry run, nothing is changed: would drain vllm/node1 at HAProxy, restart container vllm, restore traffic gradually (10% → 100% over 2m)."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := demoConfig()
			tc.edit(&cfg)
			if got := DescribeRecovery(cfg); got != tc.want {
				t.Errorf("\n got: %s\nwant: %s", got, tc.want)
			}
		})
	}
}

func TestDisplayURLDropsCredentials(t *testing.T) {
	if got := displayURL("http://user:" + testAPIKey + "@10.0.0.5:8000/?key=" + testAPIKey); got != "http://10.0.0.5:8000/" {
		t.Errorf("displayURL kept credentials: %q", got)
	}
}

func readFile(name string) (string, error) {
	b, err := os.ReadFile(name)
	return string(b), err
}

func TestIncidentPagesShowThePool(t *testing.T) {
	r := demoRenderer()
	r.pool = func() string {
		return "pool: 3 members — node1 SATURATED 99 waiting, node2 healthy 2 waiting, node3 unreachable"
	}
	m := r.head(saturated(t0, 99), &watchdog.Incident{ID: "inc-1", Opened: t0}, nil)
	if !slices.Contains(m.Context, "pool: 3 members — node1 SATURATED 99 waiting, node2 healthy 2 waiting, node3 unreachable") {
		t.Fatalf("head context %q lacks the pool line", m.Context)
	}
}

// A page for an engine whose /metrics vigil cannot read (a llama-server
// started without --metrics answers 501) says its queue and rate are
// unknown: "0 / 0" and "0 tok/s" are figures nobody read.
func TestAPageSaysUnknownForAQueueNobodyRead(t *testing.T) {
	v := watchdog.Verdict{State: watchdog.StateUnknown, At: t0,
		Reason: "UNKNOWN: /metrics unreadable (501 Not Implemented); progress cannot be judged",
		Evidence: watchdog.Evidence{MetricsError: "501 Not Implemented", Samples: 1, NoRates: true,
			Models: "200 in 1ms (tiny)", Probe: "ok in 4ms"}}
	var text []string
	for _, f := range demoRenderer().fields(v) {
		text = append(text, f.Name+": "+f.Value)
	}
	got := strings.Join(text, "; ")
	for _, want := range []string{"Waiting / running: unknown (/metrics unreadable)", "Throughput: unknown"} {
		if !strings.Contains(got, want) {
			t.Errorf("fields %q lack %q", got, want)
		}
	}
	if strings.Contains(got, "0 / 0") || strings.Contains(got, "0 tok/s") || strings.Contains(got, "Progress counters") {
		t.Errorf("fields give figures nobody read: %q", got)
	}
}
