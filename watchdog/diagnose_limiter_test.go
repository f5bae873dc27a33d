package watchdog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

// scriptedVigil is a vigil's /status as diagnose reads it: counts that
// are a function of the time since the run began.
type scriptedVigil struct {
	start  time.Time
	counts func(since time.Duration) (LimiterLoad, error)
}

func (v *scriptedVigil) ReadLimiter(context.Context) (LimiterLoad, error) {
	return v.counts(time.Since(v.start))
}

func (v *scriptedVigil) String() string { return "the vigil at http://127.0.0.1:9108" }

// flowing: the engine streams vigil's calls until stop, reads and answers
// growing with the time since the start; then nothing more moves.
func flowing(stop time.Duration) func(time.Duration) (LimiterLoad, error) {
	return func(d time.Duration) (LimiterLoad, error) {
		d = min(d, stop)
		return LimiterLoad{InFlight: 8, EngineReads: 5000 + uint64(d/time.Second)*40, Answered: 100 + uint64(d/(10*time.Second))}, nil
	}
}

// The evidence merge: diagnose's samples of an engine whose every endpoint
// times out, joined with the counts the local vigil's limiter reports at
// each, give the verdict the daemon gives on the same history.
func TestDiagnoseJoinsTheLocalVigilsLimiterCounts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// counts is the vigil's answer at a time since the start; nil: no
		// vigil read.
		counts  func(time.Duration) (LimiterLoad, error)
		want    State
		reason  string
		seen    *LimiterSeen // From and Samples filled below; Error compared as set or not
		text    string
		failed  bool
		notText string
	}{
		{
			name: "no vigil read: a wedge", want: StateHung,
			reason:  "HUNG (wedged API server): no answer at all from /v1/models, /health or /metrics for 1m00s (timeouts, not refusals); probe",
			notText: "through vigil",
		},
		{
			name: "calls answered through vigil all along: starved, not hung", counts: flowing(time.Hour), want: StateSaturated,
			reason: "SATURATED: API server timing out (no answer from /v1/models, /health or /metrics for 1m00s) but 6 calls answered through vigil in the last 1m00s, bytes flowing at the last sample: not hung",
			seen:   &LimiterSeen{Read: 7, Answered: 6, EngineReads: 2400, Over: time.Minute},
			text:   "through vigil      6 calls answered, 2,400 reads of the engine's answers over 1m00s (last byte 0s before the last reading); the vigil at http://127.0.0.1:9108, counts at 7 of 7 samples",
		},
		{
			name: "a limiter that carries no byte: hung, nothing through vigil either", counts: flowing(0), want: StateHung,
			reason: "HUNG (wedged API server): no answer at all from /v1/models, /health or /metrics for 1m00s (timeouts, not refusals); no byte through vigil's limiter for 1m00s either",
			seen:   &LimiterSeen{Read: 7, Over: time.Minute, Quiet: time.Minute},
			text:   "0 calls answered, 0 reads of the engine's answers over 1m00s (no byte)",
		},
		{
			name: "bytes that stopped hang_after before the end: hung", counts: flowing(20 * time.Second), want: StateHung,
			reason: "no byte through vigil's limiter for 40s either",
			seen:   &LimiterSeen{Read: 7, Answered: 2, EngineReads: 800, Over: time.Minute, Quiet: 40 * time.Second},
		},
		{
			name: "bytes that stopped less than hang_after before the end: not yet hung", counts: flowing(40 * time.Second), want: StateSaturated,
			reason: "4 calls answered through vigil in the last 1m00s, last bytes 20s ago: not hung",
			seen:   &LimiterSeen{Read: 7, Answered: 4, EngineReads: 1600, Over: time.Minute, Quiet: 20 * time.Second},
		},
		{
			name: "the vigil restarted mid-window: the fall adds nothing, the counts after it still do",
			counts: func(d time.Duration) (LimiterLoad, error) {
				if d >= 25*time.Second {
					return LimiterLoad{EngineReads: uint64(d/time.Second) * 10, Answered: uint64(d / (10 * time.Second))}, nil
				}
				return LimiterLoad{EngineReads: 90000, Answered: 7000}, nil
			},
			want:   StateSaturated,
			reason: "but 3 calls answered through vigil in the last 1m00s, bytes flowing at the last sample: not hung",
			seen:   &LimiterSeen{Read: 7, Answered: 3, EngineReads: 300, Over: time.Minute},
		},
		{
			name: "a vigil that stops answering /status: what it said before still counts", want: StateSaturated,
			counts: func(d time.Duration) (LimiterLoad, error) {
				if d > 45*time.Second {
					return LimiterLoad{}, errors.New("status: GET http://127.0.0.1:9108/status: connection refused")
				}
				return flowing(time.Hour)(d)
			},
			reason: "SATURATED: API server timing out",
			seen:   &LimiterSeen{Read: 5, Answered: 4, EngineReads: 1600, Over: 40 * time.Second},
			failed: true,
			text:   "last failed read: status: GET http://127.0.0.1:9108/status: connection refused",
		},
		{
			name: "a vigil that never answers: judged on the engine alone", want: StateHung,
			counts: func(time.Duration) (LimiterLoad, error) {
				return LimiterLoad{}, errors.New("status: GET http://127.0.0.1:9108/status: connection refused")
			},
			reason: "HUNG (wedged API server): no answer at all from /v1/models, /health or /metrics for 1m00s (timeouts, not refusals); probe",
			seen:   &LimiterSeen{},
			failed: true,
			text:   "through vigil      not counted: the vigil at http://127.0.0.1:9108 gave the limiter's counts at 0 of 7 samples; last failure: status: GET",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeEngine()
				f.set(func(f *fakeEngine) { f.mode = "wedged" })
				opts := diagnoseOptions(f)
				opts.Watchdog.HangAfter = configs.Fixed(30 * time.Second)
				if tc.counts != nil {
					opts.LimiterSource = &scriptedVigil{start: time.Now(), counts: tc.counts}
				}
				r, err := Diagnose(context.Background(), opts, time.Minute, 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if r.State != tc.want || !strings.Contains(r.Reason, tc.reason) {
					t.Fatalf("%s: %s\nwant %s containing %q", r.State, r.Reason, tc.want, tc.reason)
				}
				if tc.seen == nil {
					if r.Limiter != nil {
						t.Fatalf("a report without a vigil read has limiter counts: %+v", r.Limiter)
					}
				} else {
					want := *tc.seen
					want.From, want.Samples, want.Error = "the vigil at http://127.0.0.1:9108", 7, ""
					got := *r.Limiter
					if (got.Error != "") != tc.failed {
						t.Errorf("read failure %q, want one: %v", got.Error, tc.failed)
					}
					got.Error = ""
					if got != want {
						t.Errorf("limiter seen\n got %+v\nwant %+v", got, want)
					}
				}
				var text bytes.Buffer
				if err := r.WriteText(&text); err != nil {
					t.Fatal(err)
				}
				if tc.text != "" && !strings.Contains(text.String(), tc.text) {
					t.Errorf("text lacks %q:\n%s", tc.text, text.String())
				}
				if tc.notText != "" && strings.Contains(text.String(), tc.notText) {
					t.Errorf("text has %q:\n%s", tc.notText, text.String())
				}
				if tc.seen != nil {
					raw, err := json.Marshal(r)
					if err != nil {
						t.Fatal(err)
					}
					var doc struct {
						Limiter struct {
							Answered uint64  `json:"answered"`
							Over     float64 `json:"over_seconds"`
						} `json:"limiter"`
					}
					if err := json.Unmarshal(raw, &doc); err != nil || doc.Limiter.Answered != tc.seen.Answered || doc.Limiter.Over != tc.seen.Over.Seconds() {
						t.Errorf("JSON limiter %+v (%v), want %d answered over %s", doc.Limiter, err, tc.seen.Answered, tc.seen.Over)
					}
				}
			})
		})
	}
}
