package main

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/simclient"
)

func TestLongCallsFollowTheIssuesWorkload(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 20000
	var prompts, outputs []int
	sum := 0
	for range n {
		c := longCall(rng)
		if c.Prompt < 10800 || c.Prompt > 13200 {
			t.Fatalf("prompt of %d tokens, want 12,000 ± 1,200", c.Prompt)
		}
		if c.Prefix != 2000 || c.PrefixID != longPrefixID {
			t.Fatalf("prefix %d tokens id %q, want the shared 2,000-token prefix", c.Prefix, c.PrefixID)
		}
		if c.Output < 1 || c.Output > longAnswerMax {
			t.Fatalf("answer of %d tokens, want 1..%d", c.Output, longAnswerMax)
		}
		prompts = append(prompts, c.Prompt)
		outputs = append(outputs, c.Output)
		sum += c.Prompt
	}
	if mean := float64(sum) / n; mean < 11950 || mean > 12050 {
		t.Errorf("mean prompt %.0f tokens, want 12,000", mean)
	}
	slices.Sort(prompts)
	// Uniform over 12,000 ± 1,200: the quartiles sit at ± 600.
	if q1, q3 := prompts[n/4], prompts[3*n/4]; q1 < 11350 || q1 > 11450 || q3 < 12550 || q3 > 12650 {
		t.Errorf("prompt quartiles %d and %d, want about 11,400 and 12,600 (uniform)", q1, q3)
	}
	slices.Sort(outputs)
	if med := outputs[n/2]; med < 290 || med > 310 {
		t.Errorf("median answer %d tokens, want 300", med)
	}
	// Lognormal, sigma 0.5: the 84th percentile is e^0.5 times the median.
	if p84 := outputs[n*841/1000]; p84 < 475 || p84 > 515 {
		t.Errorf("84th percentile answer %d tokens, want about 495 (lognormal, sigma 0.5)", p84)
	}
}

func TestLongCallsSendNoDeadline(t *testing.T) {
	var o options
	if p := o.longSpec().policy; p.Timeout != 0 || p.MaxRetries != 0 {
		t.Errorf("policy %+v: want no timeout (no X-Stainless-Timeout) and no retries", p)
	}
}

func TestGoodputCountsCompletedStreamsWithinTheObjective(t *testing.T) {
	obj := 690 * time.Millisecond
	r := result{arm: arm{name: "cap 8", cap: 8}, calls: []simclient.Result{
		{Delivered: true, TTFT: 400 * time.Millisecond},
		{Delivered: true, TTFT: 690 * time.Millisecond},
		{Delivered: true, TTFT: 2 * time.Second},
		{TTFT: 100 * time.Millisecond, Statuses: map[int]int{200: 1}, Errors: 1}, // cut before [DONE]
		{Statuses: map[int]int{503: 1}},
	}}
	r.score(obj, 20*time.Second)
	if r.good != 2 || r.goodput != 0.1 || r.delivered != 3 || r.rejected != 1 {
		t.Errorf("good %d (goodput %v/s), completed %d, rejected %d; want 2 within the objective over 20 s = 0.1/s, 3 completed, 1 rejected",
			r.good, r.goodput, r.delivered, r.rejected)
	}
}

func TestTheIssueTableComparesWithTheBestFixedCap(t *testing.T) {
	rs := []result{
		{arm: arm{name: "ungated", cap: -1}, goodput: 0.01},
		{arm: arm{name: "cap 8", cap: 8}, goodput: 0.3},
		{arm: arm{name: "cap 32", cap: 32}, goodput: 0.1},
		// The no-queue arm does not set the baseline, even when higher.
		{arm: arm{name: "no-queue gateway, cap 8", cap: 8, noQueue: true}, goodput: 0.6},
		{arm: arm{name: "vigil defaults", cap: 0}, goodput: 0.15},
	}
	if b := bestFixed(rs); b == nil || b.arm.name != "cap 8" {
		t.Fatalf("best fixed cap %v, want cap 8", b)
	}
	var out bytes.Buffer
	printIssueTable(&out, rs, time.Minute)
	for _, want := range []string{"| vigil defaults ", "0.50x", "2.00x", "Best fixed cap: cap 8"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}
