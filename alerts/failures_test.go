package alerts

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/slack-go/slack/slacktest"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/watchdog"
)

// authTestServer is slacktest with auth.test answered by answer (nil: the
// stock answer, ok). status, when set, is the HTTP status instead.
func authTestServer(t *testing.T, apiErr string, status int) string {
	t.Helper()
	st := slacktest.NewTestServer(func(c slacktest.Customize) {
		if apiErr == "" && status == 0 {
			return
		}
		c.Handle("/auth.test", func(w http.ResponseWriter, r *http.Request) {
			if status != 0 {
				w.WriteHeader(status)
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": apiErr})
		})
	})
	st.Start()
	t.Cleanup(st.Stop)
	return st.GetAPIURL()
}

// A wrong Slack token was found only when the first page failed, and
// every page of that incident was lost. It is now found at start.
func TestSlackTokenIsCheckedAtStart(t *testing.T) {
	t.Setenv("VIGIL_TEST_SLACK_TOKEN", testToken)
	cases := []struct {
		name    string
		apiErr  string
		status  int
		down    bool
		wantErr string // "" : start goes on
		warns   bool   // logged as a warning
	}{
		{name: "a valid token", wantErr: ""},
		{name: "invalid_auth", apiErr: "invalid_auth", wantErr: "invalid_auth: the bot token was rejected"},
		{name: "not_authed", apiErr: "not_authed", wantErr: "not_authed"},
		{name: "account_inactive", apiErr: "account_inactive", wantErr: "account_inactive: the bot token belongs to a deactivated account"},
		{name: "token_revoked", apiErr: "token_revoked", wantErr: "token_revoked: the bot token was revoked"},
		{name: "an unlisted refusal", apiErr: "invalid_token_kind", wantErr: "invalid_token_kind: Slack refused the bot token"},
		{name: "Slack's own trouble is only a warning", apiErr: "internal_error", warns: true},
		{name: "a 503 is only a warning", status: http.StatusServiceUnavailable, warns: true},
		{name: "Slack unreachable is only a warning", down: true, warns: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url := authTestServer(t, tc.apiErr, tc.status)
			if tc.down {
				url = "http://" + closedAddr(t) + "/api/"
			}
			cfg := configs.SlackAlerts{
				TokenSource: configs.SecretSource{Env: "VIGIL_TEST_SLACK_TOKEN"},
				Token:       testToken, Channel: channel, APIURL: url,
			}
			n, err := NewSlack(cfg, &http.Client{Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			log, buf := testLogger()
			err = CheckNotifier(context.Background(), n, log, 5*time.Second)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("start refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), "environment variable VIGIL_TEST_SLACK_TOKEN"):
				t.Errorf("err = %v, want it to name where the token came from", err)
			}
			if err != nil && strings.Contains(err.Error(), testToken) {
				t.Error("the error carries the token")
			}
			logs := buf.String()
			if got := strings.Contains(logs, `"level":"warning"`); got != tc.warns {
				t.Errorf("warned = %v, want %v; logs:\n%s", got, tc.warns, logs)
			}
			if strings.Contains(logs, testToken) {
				t.Error("the log carries the token")
			}
		})
	}
}

func TestCheckNotifierLetsNotifiersWithoutACheckThrough(t *testing.T) {
	if err := CheckNotifier(context.Background(), NewLog(nil), nil, time.Second); err != nil {
		t.Fatal(err)
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	srv := slacktest.NewTestServer()
	srv.Start()
	addr := srv.ServerAddr
	srv.Stop()
	return addr
}

// refusingNotifier refuses the pages pick says, for good, and records
// the others as a Threader would (each post gets a ts).
type refusingNotifier struct {
	mu    sync.Mutex
	pick  func(m Message) bool
	pages []Message
}

func (n *refusingNotifier) Notify(ctx context.Context, m Message) (bool, error) {
	_, retry, err := n.Post(ctx, m)
	return retry, err
}

func (n *refusingNotifier) Post(_ context.Context, m Message) (string, bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pick(m) {
		return "", false, errRefused
	}
	n.pages = append(n.pages, m)
	return "ts-" + string(rune('0'+len(n.pages))), false, nil
}

func (n *refusingNotifier) got() []Message {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Message(nil), n.pages...)
}

type refusal string

func (r refusal) Error() string { return string(r) }

const errRefused = refusal("slack: post to channel C0VIGIL: invalid_blocks")

// A page refused for good was only a log line; the head of an incident
// went with it, leaving the replies without their story. Now it is logged
// at error level with its title, counted, and the head's text reaches the
// operator with the next page, which becomes the thread's head.
func TestAPageRefusedForGoodIsLoggedCountedAndTheHeadStillArrives(t *testing.T) {
	n := &refusingNotifier{pick: func(m Message) bool { return m.Kind == KindHead }}
	clk, sl := newClock(), &sleeps{}
	o := testOptions(clk, sl)
	reg := prometheus.NewRegistry()
	o.Registerer = reg
	log, buf := testLogger()
	o.Log = log
	p := newTestPager(t, n, o)
	runPager(t, p)

	inc := &watchdog.Incident{ID: "inc-lost", Opened: clk.Now(), State: watchdog.StateHung}
	p.Observe(hung(clk.Now()), inc)
	flush(t, p)
	clk.Advance(15 * time.Second)
	p.RecoveryStep(recovery.Step{Incident: "inc-lost", Name: recovery.StepDrain, OK: true, Detail: "haproxy vllm/node1 DRAIN", At: clk.Now()})
	p.RecoveryStep(recovery.Step{Incident: "inc-lost", Name: recovery.StepDrainWait, OK: true, Detail: "no sessions left after 1s", At: clk.Now()})
	flush(t, p)

	got := n.got()
	if len(got) != 2 {
		t.Fatalf("delivered %d pages, want the two steps", len(got))
	}
	first := got[0]
	if !strings.Contains(first.Text, "First page of this incident") || !strings.Contains(first.Text, "HUNG on node1") ||
		!strings.Contains(first.Text, "drained at the load balancer") || first.ThreadTS != "" {
		t.Errorf("the first delivered page should carry the lost head, posted on its own: %+v", first)
	}
	if got[1].ThreadTS != "ts-1" || strings.Contains(got[1].Text, "First page") {
		t.Errorf("the next reply should thread under the page that carried the head: %+v", got[1])
	}
	if v := testutil.ToFloat64(p.metrics.failed.WithLabelValues(failRejected)); v != 1 {
		t.Errorf("vigil_alerts_pages_failed_total{reason=rejected} = %v, want 1", v)
	}
	if c, err := testutil.GatherAndCount(reg, "vigil_alerts_pages_failed_total"); err != nil || c != 2 {
		t.Errorf("vigil_alerts_pages_failed_total registered with %d series, %v; want 2 (rejected, outbox_full)", c, err)
	}
	logs := buf.String()
	if !strings.Contains(logs, `"level":"error"`) || !strings.Contains(logs, `"title":":red_circle: HUNG on node1"`) {
		t.Errorf("want an error log line with the page's title; logs:\n%s", logs)
	}
}

// A head dropped from the full outbox is carried by the resolve.
func TestAHeadDroppedFromTheFullOutboxIsCarriedByTheNextPage(t *testing.T) {
	n := &memNotifier{}
	clk, sl := newClock(), &sleeps{}
	o := testOptions(clk, sl)
	o.OutboxSize = 1
	log, buf := testLogger()
	o.Log = log
	p := newTestPager(t, n, o)

	inc := &watchdog.Incident{ID: "inc-full", Opened: clk.Now(), State: watchdog.StateHung}
	p.Observe(hung(clk.Now()), inc)
	clk.Advance(time.Minute)
	resolveNow(p, inc, clk.Now())

	resolve := lastOfKind(delivered(t, p, n), KindResolve)
	if !strings.Contains(resolve.Text, "First page of this incident") || !strings.Contains(resolve.Text, "HUNG on node1") {
		t.Fatalf("the resolve should carry the dropped head; delivered %+v", n.got())
	}
	if v := testutil.ToFloat64(p.metrics.failed.WithLabelValues(failOutboxFull)); v != 1 {
		t.Errorf("vigil_alerts_pages_failed_total{reason=outbox_full} = %v, want 1", v)
	}
	if logs := buf.String(); !strings.Contains(logs, `"level":"error"`) || !strings.Contains(logs, "HUNG on node1") {
		t.Errorf("want an error log line naming the dropped head; logs:\n%s", logs)
	}
}

// switchOn is a sleep that records the waits and brings Slack back after
// the given number of them.
type switchOn struct {
	sleeps
	after int
	fs    *fakeSlack
}

func (s *switchOn) Sleep(ctx context.Context, d time.Duration) error {
	if len(s.All())+1 == s.after {
		s.fs.set(func(f *fakeSlack) { f.status = 0 })
	}
	return s.sleeps.Sleep(ctx, d)
}

// Slack answering 500 for an hour: the waits between attempts grew to 5
// minutes, so the page lagged up to 5 minutes behind Slack's return.
func TestSlackDownForLongRetriesAtMostAMinuteApart(t *testing.T) {
	fs := newFakeSlack(t)
	fs.set(func(f *fakeSlack) { f.status = http.StatusInternalServerError })
	clk := newClock()
	sl := &switchOn{after: 40, fs: fs}
	o := testOptions(clk, nil)
	o.Sleep = sl.Sleep
	p := newTestPager(t, newSlackNotifier(t, fs, false), o)
	runPager(t, p)

	p.Notice("override", "max_in_flight raised to 64")
	flush(t, p)

	waits := sl.All()
	if len(waits) != 40 {
		t.Fatalf("%d waits before delivery, want 40: %v", len(waits), waits)
	}
	var total time.Duration
	for i, w := range waits {
		total += w
		if w > time.Minute {
			t.Errorf("wait %d = %v, want at most a minute", i, w)
		}
	}
	if last := waits[len(waits)-1]; last != time.Minute {
		t.Errorf("after a long outage the wait is %v, want the one-minute cap", last)
	}
	if total < 30*time.Minute {
		t.Errorf("the outage spanned %v of waits; the test wants a long one", total)
	}
	if got := fs.posts(); len(got) != 1 || !strings.Contains(got[0].Form.Get("text"), "max_in_flight raised to 64") {
		t.Errorf("posts after Slack came back: %v", texts(got))
	}
}
