package alerts

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/state"
	"github.com/vigil-dev/vigil/watchdog"
)

const channel = "C0VIGIL"

func newSlackNotifier(t *testing.T, fs *fakeSlack, updateHead bool) *Slack {
	t.Helper()
	sl, err := NewSlack(configs.SlackAlerts{Token: testToken, Channel: channel, APIURL: fs.APIURL(), UpdateHead: updateHead}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return sl
}

// testOptions are the demo node's options on a fake clock with recorded
// sleeps.
func testOptions(clk *fakeClock, sl *sleeps) Options {
	o := OptionsFromConfig(demoConfig())
	o.Secrets = []configs.Secret{testToken, testAPIKey}
	o.Now, o.Sleep = clk.Now, sl.Sleep
	o.Jitter = func() float64 { return 1 } // the top of each step: exact waits
	return o
}

func newTestPager(t *testing.T, n Notifier, o Options) *Pager {
	t.Helper()
	p, err := NewPager(n, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func headTS(p *Pager, incident string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st.Heads[incident].TS
}

func TestSaturationCyclesPostOneHeadAndFewUpdates(t *testing.T) {
	cases := []struct {
		name        string
		updateEvery time.Duration
		grow        float64 // the queue's growth per cycle
		minUpdates  int
		maxUpdates  int
	}{
		{"twenty cycles of steady saturation post one head and nothing else", 10 * time.Minute, 1, 0, 0},
		{"twenty cycles of a growing queue with update_every 2m post one head and at most two updates", 2 * time.Minute, 1.3, 1, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeSlack(t)
			clk, sl := newClock(), &sleeps{}
			o := testOptions(clk, sl)
			o.UpdateEvery = tc.updateEvery
			p := newTestPager(t, newSlackNotifier(t, fs, false), o)
			runPager(t, p)

			inc := &watchdog.Incident{ID: "inc-sat", Opened: clk.Now(), State: watchdog.StateSaturated}
			waiting := 99.0
			for range 20 {
				p.Observe(saturated(clk.Now(), waiting), inc)
				waiting *= tc.grow
				clk.Advance(15 * time.Second)
			}
			flush(t, p)

			posts := fs.posts()
			var heads, replies []fakeReq
			for _, r := range posts {
				if r.Form.Get("thread_ts") == "" {
					heads = append(heads, r)
				} else {
					replies = append(replies, r)
				}
			}
			if len(heads) != 1 || !strings.HasPrefix(heads[0].Form.Get("text"), ":large_orange_circle: SATURATED on node1") {
				t.Fatalf("want one SATURATED head, got %d posts: %v", len(heads), texts(posts))
			}
			if len(replies) < tc.minUpdates || len(replies) > tc.maxUpdates {
				t.Errorf("%d updates, want %d..%d: %v", len(replies), tc.minUpdates, tc.maxUpdates, texts(replies))
			}
			ts := headTS(p, "inc-sat")
			for _, r := range replies {
				if r.Form.Get("thread_ts") != ts || !strings.Contains(r.Form.Get("text"), "Still SATURATED") {
					t.Errorf("update not an evidence reply in the head's thread (%s): %+v", ts, r.Form)
				}
			}
			if got := fs.requests()[0].Form.Get("channel"); got != channel {
				t.Errorf("posted to %q", got)
			}
		})
	}
}

func texts(rs []fakeReq) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Form.Get("text"))
	}
	return out
}

// hangIncident plays a hang from first verdict to resolve, through every
// recovery step.
func hangIncident(p *Pager, clk *fakeClock, id string) {
	inc := &watchdog.Incident{ID: id, Opened: clk.Now(), State: watchdog.StateHung, Peak: watchdog.StateHung}
	for range 3 {
		p.Observe(hung(clk.Now()), inc)
		clk.Advance(15 * time.Second)
	}
	for _, s := range []recovery.Step{
		{Name: recovery.StepDrain, OK: true, Detail: "haproxy vllm/node1 DRAIN"},
		{Name: recovery.StepDrainWait, OK: true, Detail: "3 sessions left after 15s (hung: not waiting longer)"},
		{Name: recovery.StepRestart, OK: true, Detail: "container vllm restarted in 4s", Dropped: 48},
		{Name: recovery.StepWaitReady, OK: true, Detail: "/v1/models 200 and a probe completed after 3m10s"},
		{Name: recovery.StepRestore, OK: true, Detail: "READY, weight 10% → 100% over 2m; limiter slow start"},
		{Name: recovery.StepResolved, OK: true, Detail: "traffic restored 5m40s after the hang was detected"},
	} {
		s.Incident, s.At = id, clk.Now()
		p.RecoveryStep(s)
		p.Observe(watchdog.Verdict{State: watchdog.StateLoading, At: clk.Now()}, inc)
		clk.Advance(15 * time.Second)
	}
	resolved := *inc
	resolved.State, resolved.Resolved = watchdog.StateHealthy, clk.Now()
	p.Observe(healthy(clk.Now()), &resolved)
	clk.Advance(15 * time.Second)
	p.Observe(healthy(clk.Now()), nil)
}

// hangPages are the prefixes of the pages a hang thread holds, in order.
var hangPages = []string{
	":red_circle: HUNG on node1 (http://127.0.0.1:8000): no progress for 3m05s",
	":arrow_down: node1: drained at the load balancer",
	":hourglass_flowing_sand: node1: drain wait over",
	":arrows_counterclockwise: node1: restarted the engine: container vllm restarted in 4s; aborted 48 in-flight requests.",
	":white_check_mark: node1: engine ready",
	":arrow_up: node1: restoring traffic",
	":white_check_mark: node1: recovery finished",
	":large_green_circle: RESOLVED on node1 (http://127.0.0.1:8000): was HUNG for 3m50s; recovery took 75s; 2 waiting",
}

func checkThread(t *testing.T, posts []fakeReq, ts string) {
	t.Helper()
	if len(posts) != len(hangPages) {
		t.Fatalf("%d posts, want %d:\n%s", len(posts), len(hangPages), strings.Join(texts(posts), "\n"))
	}
	if ts == "" {
		t.Fatal("the pager never learnt the head's ts")
	}
	for i, r := range posts {
		if got := r.Form.Get("text"); !strings.HasPrefix(got, hangPages[i]) {
			t.Errorf("post %d:\n got: %s\nwant: %s…", i, got, hangPages[i])
		}
		want := ts
		if i == 0 {
			want = "" // the head starts the thread
		}
		if got := r.Form.Get("thread_ts"); got != want {
			t.Errorf("post %d thread_ts = %q, want %q", i, got, want)
		}
	}
}

func TestHangThreadsEveryStepUnderOneHeadAndResolves(t *testing.T) {
	fs := newFakeSlack(t)
	clk, sl := newClock(), &sleeps{}
	o := testOptions(clk, sl)
	o.UpdateHead = true
	p := newTestPager(t, newSlackNotifier(t, fs, true), o)
	runPager(t, p)

	hangIncident(p, clk, "inc-hang")
	flush(t, p)

	ts := headTS(p, "inc-hang")
	checkThread(t, fs.posts(), ts)
	var updates []fakeReq
	for _, r := range fs.delivered() {
		if strings.HasSuffix(r.Path, "/chat.update") {
			updates = append(updates, r)
		}
	}
	if len(updates) != 1 || updates[0].Form.Get("ts") != ts ||
		!strings.HasPrefix(updates[0].Form.Get("text"), ":large_green_circle: RESOLVED on node1") {
		t.Errorf("want the head rewritten once as RESOLVED, got %d updates: %v", len(updates), texts(updates))
	}
	if n := testutil.ToFloat64(p.metrics.sent.WithLabelValues("step")); n != 6 {
		t.Errorf("steps sent = %v, want 6", n)
	}
}

func TestSlackRateLimitIsHonoured(t *testing.T) {
	fs := newFakeSlack(t)
	fs.set(func(f *fakeSlack) { f.limitN, f.retryAfter = 1, "2" })
	clk, sl := newClock(), &sleeps{}
	p := newTestPager(t, newSlackNotifier(t, fs, false), testOptions(clk, sl))
	runPager(t, p)

	p.Notice("digest", "yesterday: 0 restarts, saturated 42m")
	flush(t, p)

	reqs := fs.requests()
	if len(reqs) != 2 || reqs[0].Delivered || !reqs[1].Delivered {
		t.Fatalf("want one 429 then one delivery, got %+v", reqs)
	}
	waits := sl.All()
	if len(waits) != 1 || waits[0] < 2*time.Second {
		t.Errorf("waited %v before the retry, want at least Retry-After: 2s", waits)
	}
}

// flaky fails its first n deliveries with a retryable error.
type flaky struct {
	memNotifier
	n int
}

func (f *flaky) Notify(ctx context.Context, m Message) (bool, error) {
	f.mu.Lock()
	if f.n > 0 {
		f.n--
		f.mu.Unlock()
		return true, errors.New("slack: post to channel C0VIGIL: slack server error: 503 Service Unavailable")
	}
	f.mu.Unlock()
	return f.memNotifier.Notify(ctx, m)
}

// With jitter drawn at random, every wait is in the upper half of its
// step: two vigils that failed together drift apart.
func TestRetryWaitsAreJittered(t *testing.T) {
	n, sl := &flaky{n: 7}, &sleeps{}
	o := testOptions(newClock(), sl)
	o.RetryInitial, o.RetryMax, o.Jitter = time.Second, 10*time.Second, nil
	p := newTestPager(t, n, o)
	runPager(t, p)
	p.Notice("override", "x")
	flush(t, p)
	steps := []time.Duration{1, 2, 4, 8, 10, 10, 10}
	got := sl.All()
	if len(got) != len(steps) {
		t.Fatalf("waits %v", got)
	}
	for i, w := range got {
		if lo, hi := steps[i]*time.Second/2, steps[i]*time.Second; w < lo || w > hi {
			t.Errorf("jittered wait %d = %v, want within [%v, %v]", i, w, lo, hi)
		}
	}
}

func TestRetriesBackOffExponentiallyWithinBounds(t *testing.T) {
	n := &flaky{n: 7}
	clk, sl := newClock(), &sleeps{}
	o := testOptions(clk, sl)
	o.RetryInitial, o.RetryMax = time.Second, 10*time.Second
	p := newTestPager(t, n, o)
	runPager(t, p)
	p.Notice("override", "max_in_flight raised to 64", Field{"until", "18:00 UTC"})
	flush(t, p)

	want := []time.Duration{1, 2, 4, 8, 10, 10, 10}
	got := sl.All()

	if len(got) != len(want) {
		t.Fatalf("waits %v, want %v seconds", got, want)
	}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Errorf("wait %d = %v, want %v", i, got[i], want[i]*time.Second)
		}
	}
	if pages := n.got(); len(pages) != 1 || pages[0].Text != ":wrench: node1: max_in_flight raised to 64 (until: 18:00 UTC)" {
		t.Errorf("pages = %+v", pages)
	}
	if e := testutil.ToFloat64(p.metrics.errors.WithLabelValues("true")); e != 7 {
		t.Errorf("send errors = %v, want 7", e)
	}
}

func TestPagesQueuedWhileSlackIsUnreachableArriveInOrder(t *testing.T) {
	fs := newFakeSlack(t)
	fs.set(func(f *fakeSlack) { f.down = true })
	clk, sl := newClock(), &sleeps{}
	p := newTestPager(t, newSlackNotifier(t, fs, false), testOptions(clk, sl))
	runPager(t, p)

	hangIncident(p, clk, "inc-outage")
	testinfra.WaitFor(t, 10*time.Second, "the sender to fail a few times", func() bool { return len(fs.requests()) >= 3 })
	if len(fs.posts()) != 0 {
		t.Fatal("delivered while Slack was down")
	}
	fs.set(func(f *fakeSlack) { f.down = false })
	flush(t, p)

	checkThread(t, fs.posts(), headTS(p, "inc-outage"))
}

func TestOutboxSurvivesRestart(t *testing.T) {
	fs := newFakeSlack(t)
	fs.set(func(f *fakeSlack) { f.down = true })
	path := filepath.Join(t.TempDir(), "state.json")
	clk, sl := newClock(), &sleeps{}

	store1, err := state.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions(clk, sl)
	o.Store = store1
	first := newTestPager(t, newSlackNotifier(t, fs, false), o)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- first.Run(ctx) }()
	hangIncident(first, clk, "inc-restart")
	testinfra.WaitFor(t, 10*time.Second, "the first vigil to try", func() bool { return len(fs.requests()) >= 2 })
	cancel() // vigil stops with every page still queued
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}

	store2, err := state.Open(path) // a new process reads the file
	if err != nil {
		t.Fatal(err)
	}
	o.Store = store2
	second := newTestPager(t, newSlackNotifier(t, fs, false), o)
	if q := second.Queued(); q != len(hangPages) {
		t.Fatalf("restored %d pages, want %d", q, len(hangPages))
	}
	fs.set(func(f *fakeSlack) { f.down = false })
	runPager(t, second)
	flush(t, second)

	checkThread(t, fs.posts(), headTS(second, "inc-restart"))
	// The restored thread state keeps the steady state quiet after restart.
	second.Observe(healthy(clk.Now()), nil)
	if second.Queued() != 0 {
		t.Error("a restarted vigil paged again for an incident it already closed")
	}
}

func TestFullOutboxDropsUpdatesFirstAndSaysHowMany(t *testing.T) {
	n := &memNotifier{}
	clk, sl := newClock(), &sleeps{}
	o := testOptions(clk, sl)
	o.OutboxSize, o.UpdateEvery = 4, time.Minute
	reg := prometheus.NewRegistry()
	o.Registerer = reg
	p := newTestPager(t, n, o)

	inc := &watchdog.Incident{ID: "inc-full", Opened: clk.Now(), State: watchdog.StateSaturated}
	waiting := 10.0
	for range 6 { // a head, then five updates as the queue doubles
		p.Observe(saturated(clk.Now(), waiting), inc)
		waiting *= 2
		clk.Advance(time.Minute)
	}
	p.RecoveryStep(recovery.Step{Incident: "inc-full", Name: recovery.StepGuardRefused, Detail: "saturated: not a restart case", At: clk.Now()})
	resolveNow(p, inc, clk.Now())

	var kinds []string
	for _, m := range delivered(t, p, n) {
		kinds = append(kinds, string(m.Kind))
	}
	want := []string{"dropped", "head", "update", "step", "resolve"}
	if strings.Join(kinds, " ") != strings.Join(want, " ") {
		t.Fatalf("delivered %v, want %v", kinds, want)
	}
	note := n.got()[0].Text
	if !strings.Contains(note, "4 pages were dropped") {
		t.Errorf("note = %q", note)
	}
	if last := n.got()[2].Text; !strings.Contains(last, "320 waiting") {
		t.Errorf("the newest update should survive, got %q", last)
	}
	if d := testutil.ToFloat64(p.metrics.dropped); d != 4 {
		t.Errorf("dropped metric = %v, want 4", d)
	}
	if c, err := testutil.GatherAndCount(reg, "vigil_alerts_pages_dropped_total", "vigil_alerts_outbox_queued"); err != nil || c != 2 {
		t.Errorf("registered metrics: %d, %v", c, err)
	}
}

func TestFullOutboxOfHeadsDropsTheIncomingUpdate(t *testing.T) {
	n := &memNotifier{}
	clk, sl := newClock(), &sleeps{}
	o := testOptions(clk, sl)
	o.OutboxSize, o.UpdateEvery = 2, time.Minute
	p := newTestPager(t, n, o)

	p.Observe(saturated(clk.Now(), 10), &watchdog.Incident{ID: "a", State: watchdog.StateSaturated})
	p.Notice("retry_storm", "prompt tokens rise at 12% of prefix-cache queries") // tier 1
	clk.Advance(2 * time.Minute)
	p.Observe(saturated(clk.Now(), 1000), &watchdog.Incident{ID: "a", State: watchdog.StateSaturated}) // an update: tier 0
	p.mu.Lock()
	var kinds []Kind
	for _, m := range p.st.Outbox {
		kinds = append(kinds, m.Kind)
	}
	dropped := p.st.Dropped
	p.mu.Unlock()
	if len(kinds) != 2 || kinds[0] != KindHead || kinds[1] != KindNotice || dropped != 1 {
		t.Errorf("outbox %v with %d dropped; want the head and the notice kept, the update dropped", kinds, dropped)
	}
}

func TestSecretsNeverAppearInPagesOrLogs(t *testing.T) {
	fs := newFakeSlack(t)
	clk, sl := newClock(), &sleeps{}
	log, logs := testLogger()
	webhookURL := fs.WebhookURL()

	// Other packages' strings carry the secrets, as a careless error would.
	leak := func(p *Pager, id string) {
		v := hung(clk.Now())
		v.Reason = "probe got 401 with Authorization: Bearer " + testAPIKey
		v.Evidence.Probe = "401 (key " + testAPIKey + ")"
		inc := &watchdog.Incident{ID: id, Opened: clk.Now(), State: watchdog.StateHung}
		p.Observe(v, inc)
		p.RecoveryStep(recovery.Step{Incident: id, Name: recovery.StepFailed, At: clk.Now(),
			Err: "POST " + webhookURL + " token=" + testToken, Detail: "retrying with " + testAPIKey})
		p.Notice("override", "token "+testToken+" rotated", Field{"webhook", webhookURL})
	}

	slackOpts := testOptions(clk, sl)
	slackOpts.Log = log
	slackOpts.EngineURL = "http://vigil:" + testAPIKey + "@127.0.0.1:8000"
	slackOpts.Secrets = append(slackOpts.Secrets, configs.Secret(webhookURL))
	slackPager := newTestPager(t, newSlackNotifier(t, fs, true), slackOpts)
	runPager(t, slackPager)
	leak(slackPager, "inc-secret")
	flush(t, slackPager)
	fs.set(func(f *fakeSlack) { f.apiErr = "invalid_auth" })
	slackPager.Notice("digest", "daily digest")
	flush(t, slackPager)
	fs.set(func(f *fakeSlack) { f.apiErr = "" })

	// A webhook pager: first unreachable (a closed port), then through
	// the fake, so its errors and its bodies are both checked.
	hook, err := NewWebhook(configs.Secret(webhookURL), nil)
	if err != nil {
		t.Fatal(err)
	}
	hookOpts := slackOpts
	hookOpts.Registerer = nil
	fs.set(func(f *fakeSlack) { f.down = true })
	hookPager := newTestPager(t, hook, hookOpts)
	runPager(t, hookPager)
	leak(hookPager, "inc-secret-hook")
	testinfra.WaitFor(t, 10*time.Second, "webhook failures to be logged", func() bool { return strings.Contains(logs.String(), "slack webhook: post to") })
	fs.set(func(f *fakeSlack) { f.down = false })
	flush(t, hookPager)

	var hookBodies int
	for _, r := range fs.requests() {
		body := r.Body
		if r.Form != nil {
			if r.Form.Get("token") != testToken {
				t.Errorf("Slack got token %q", r.Form.Get("token"))
			}
			f := r.Form
			f.Del("token") // the one field that must carry it
			body = f.Encode()
		}
		if strings.HasPrefix(r.Path, "/services/") && r.Delivered {
			hookBodies++
		}
		for _, secret := range []string{testToken, testAPIKey, "WEBHOOKSECRETxyz"} {
			if strings.Contains(body, secret) {
				t.Errorf("request to %s carries a secret: %s", r.Path, body)
			}
		}
	}
	if hookBodies != 3 {
		t.Errorf("webhook got %d pages, want 3", hookBodies)
	}
	out := logs.String()
	for _, want := range []string{"invalid_auth", "channel " + channel, "alerts.slack.token", "slack webhook: post to http://127.0.0.1"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{testToken, testAPIKey, "WEBHOOKSECRETxyz"} {
		if strings.Contains(out, secret) {
			t.Errorf("log carries a secret %q:\n%s", secret, out)
		}
	}
}

func TestSlackErrorsSayWhetherToRetry(t *testing.T) {
	cases := []struct {
		name      string
		set       func(f *fakeSlack)
		retry     bool
		wantErr   string
		wantAfter time.Duration
	}{
		{"a rejected token is not retried and names the channel, not the token",
			func(f *fakeSlack) { f.apiErr = "invalid_auth" }, false, "slack: post to channel C0VIGIL: invalid_auth: the bot token was rejected; check alerts.slack.token", 0},
		{"a missing channel is not retried and says to invite the bot",
			func(f *fakeSlack) { f.apiErr = "channel_not_found" }, false, "channel_not_found: no such channel, or the bot cannot see it", 0},
		{"Slack's internal error is retried",
			func(f *fakeSlack) { f.apiErr = "internal_error" }, true, "internal_error", 0},
		{"a 503 is retried",
			func(f *fakeSlack) { f.status = 503 }, true, "503", 0},
		{"a 429 is retried after its Retry-After",
			func(f *fakeSlack) { f.limitN, f.retryAfter = 1, "7" }, true, "rate limited, retry after 7s", 7 * time.Second},
		{"an unreachable Slack is retried",
			func(f *fakeSlack) { f.down = true }, true, "slack: post to channel C0VIGIL", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeSlack(t)
			fs.set(tc.set)
			s := newSlackNotifier(t, fs, false)
			_, retry, err := s.Post(context.Background(), Message{Kind: KindHead, Text: "x"})
			if err == nil || retry != tc.retry || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("retry=%v err=%v; want retry=%v and %q", retry, err, tc.retry, tc.wantErr)
			}
			if strings.Contains(err.Error(), testToken) {
				t.Error("error carries the token")
			}
			if got := retryAfter(err); got != tc.wantAfter {
				t.Errorf("retryAfter = %v, want %v", got, tc.wantAfter)
			}
		})
	}
}

func TestWebhookRefusalsAreNotRetried(t *testing.T) {
	fs := newFakeSlack(t)
	fs.set(func(f *fakeSlack) { f.status = 404 })
	hook, err := NewWebhook(configs.Secret(fs.WebhookURL()), nil)
	if err != nil {
		t.Fatal(err)
	}
	retry, err := hook.Notify(context.Background(), Message{Kind: KindNotice, Text: "x"})
	if retry || err == nil || !strings.Contains(err.Error(), "404") || strings.Contains(err.Error(), "WEBHOOKSECRET") {
		t.Errorf("retry=%v err=%v", retry, err)
	}
	if _, err := NewWebhook("not a url", nil); err == nil || strings.Contains(err.Error(), "not a url") {
		t.Errorf("bad URL error = %v", err)
	}
}

func TestLogNotifierLogsThePlainText(t *testing.T) {
	log, logs := testLogger()
	clk, sl := newClock(), &sleeps{}
	o := testOptions(clk, sl)
	o.UpdateHead = true // the log cannot edit: head updates are not logged
	p := newTestPager(t, NewLog(log), o)
	runPager(t, p)
	inc := &watchdog.Incident{ID: "inc-log", Opened: clk.Now(), State: watchdog.StateSaturated}
	p.Observe(saturated(clk.Now(), 99), inc)
	inc.Resolved = clk.Advance(time.Minute)
	p.Observe(healthy(clk.Now()), inc)
	flush(t, p)

	out := logs.String()
	if !strings.Contains(out, `"msg":":large_orange_circle: SATURATED on node1 (http://127.0.0.1:8000): 99 waiting`) ||
		!strings.Contains(out, `"page":"head"`) || !strings.Contains(out, `"level":"warning"`) {
		t.Errorf("log lacks the head page:\n%s", out)
	}
	if !strings.Contains(out, `"msg":":large_green_circle: RESOLVED on node1 (http://127.0.0.1:8000): was SATURATED for 60s; 2 waiting, 4 running, 1,850 tok/s`) {
		t.Errorf("log lacks the resolve:\n%s", out)
	}
	if strings.Contains(out, `"page":"head_update"`) {
		t.Error("a head update was logged")
	}
}

func TestRunRefusesASecondSender(t *testing.T) {
	p := newTestPager(t, &memNotifier{}, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { _ = p.Run(ctx) })
	testinfra.WaitFor(t, 10*time.Second, "the first sender", p.running.Load)
	if err := p.Run(ctx); err == nil {
		t.Error("a second Run started")
	}
	cancel()
	wg.Wait()
}

func TestObserveNeverWaitsForSlack(t *testing.T) {
	// Slack that never answers: the sender is stuck in a request, and the
	// watchdog's calls still return at once.
	block := make(chan struct{})
	stuck := notifierFunc(func(ctx context.Context, _ Message) (bool, error) {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return true, errors.New("timeout")
	})
	defer close(block)
	clk, sl := newClock(), &sleeps{}
	p := newTestPager(t, stuck, testOptions(clk, sl))
	runPager(t, p)
	start := time.Now()
	for i := range 200 {
		p.Observe(hung(clk.Now()), &watchdog.Incident{ID: "inc-" + string(rune('a'+i%26)), State: watchdog.StateHung})
		p.RecoveryStep(recovery.Step{Incident: "x", Name: recovery.StepDrain, OK: true})
		clk.Advance(15 * time.Second)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("400 calls took %v with Slack stuck", d)
	}
	if q := p.Queued(); q == 0 || q > 500 {
		t.Errorf("queued %d", q)
	}
}

type notifierFunc func(context.Context, Message) (bool, error)

func (f notifierFunc) Notify(ctx context.Context, m Message) (bool, error) { return f(ctx, m) }

func TestNewNotifierBuildsWhatTheConfigAsks(t *testing.T) {
	fs := newFakeSlack(t)
	cfg := configs.Default().Alerts
	if n, err := NewNotifier(cfg, nil, nil); err != nil || n == nil {
		t.Fatalf("log: %T %v", n, err)
	} else if _, ok := n.(*LogNotifier); !ok {
		t.Errorf("default kind built %T", n)
	}

	cfg.Kind = "slack"
	cfg.Slack = configs.SlackAlerts{Token: testToken, Channel: channel, APIURL: strings.TrimSuffix(fs.APIURL(), "/")}
	n, err := NewNotifier(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The API URL without its trailing "/" still reaches chat.postMessage.
	if _, ok := n.(Threader); !ok {
		t.Fatalf("slack notifier %T cannot thread", n)
	}
	if ts, _, err := n.(Threader).Post(context.Background(), Message{Kind: KindHead, Text: "hello"}); err != nil || ts == "" {
		t.Errorf("post: ts=%q err=%v", ts, err)
	}
	cfg.Slack.Token = ""
	if _, err := NewNotifier(cfg, nil, nil); err == nil || !strings.Contains(err.Error(), "alerts.slack.token") {
		t.Errorf("no token: %v", err)
	}

	cfg.Kind = "webhook"
	cfg.Webhook.URL = configs.Secret(fs.WebhookURL())
	if n, err := NewNotifier(cfg, nil, nil); err != nil {
		t.Fatal(err)
	} else if _, ok := n.(*Webhook); !ok {
		t.Errorf("webhook kind built %T", n)
	}
	cfg.Kind = "pager"
	if _, err := NewNotifier(cfg, nil, nil); err == nil {
		t.Error("an unknown kind was accepted")
	}
}
