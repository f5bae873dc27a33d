package main

import (
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/simclient"
)

func TestScoreCountsOnlyAnswersWithinTheSLO(t *testing.T) {
	r := result{calls: []simclient.Result{
		{Delivered: true, TTFT: 100 * time.Millisecond, DeliveredAt: 2 * time.Second, Tokens: 20},
		{Delivered: true, TTFT: 500 * time.Millisecond, DeliveredAt: 3 * time.Second, Tokens: 20},
		{Timeouts: 1},
		{Statuses: map[int]int{503: 1}},
	}}
	r.score(400*time.Millisecond, 10*time.Second)
	if r.good != 1 || r.goodput != 0.1 {
		t.Errorf("good %d goodput %v, want 1 answer within the SLO over 10 s = 0.1/s", r.good, r.goodput)
	}
	if r.delivered != 2 || r.timedOut != 1 || r.rejected != 1 {
		t.Errorf("delivered %d timed out %d rejected %d, want 2, 1, 1", r.delivered, r.timedOut, r.rejected)
	}
}
