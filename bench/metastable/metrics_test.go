package main

import (
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/simclient"
)

func call(start, deliveredAfter time.Duration, attempts int) simclient.Result {
	r := simclient.Result{Start: start, Attempts: attempts}
	if deliveredAfter >= 0 {
		r.Delivered, r.DeliveredAt = true, start+deliveredAfter
	}
	return r
}

func TestMeasureSortsCallsIntoTheColumns(t *testing.T) {
	const never = -1
	r := armResult{
		calls: []simclient.Result{
			call(10*time.Second, time.Second, 1),      // warm: counted only in attempts
			call(130*time.Second, 10*time.Second, 1),  // pulse, on time
			call(140*time.Second, 300*time.Second, 3), // pulse, late
			call(150*time.Second, never, 4),           // pulse, lost
			call(300*time.Second, 119*time.Second, 1), // hold, on time
			call(400*time.Second, 121*time.Second, 2), // hold, late but delivered
			call(500*time.Second, 900*time.Second, 4), // hold, past the 840 s horizon
			call(600*time.Second, never, 4),           // hold, lost
		},
		phase: []int{phaseWarm, phasePulse, phasePulse, phasePulse, phaseHold, phaseHold, phaseHold, phaseHold},
		hold0: enginesim.Stats{Received: 100, Completed: 90},
		hold1: enginesim.Stats{Received: 100 + 720, Completed: 90 + 360},
	}
	m := measure(r, 2)
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"pulse delivered", m.pulseDelivered, 2.0 / 3},
		{"pulse late", m.pulseLate, 1.0 / 3},
		{"hold delivered within 840 s", m.holdDelivered, 2.0 / 4},
		{"hold within the first deadline", m.holdOnTime, 1.0 / 4},
		{"executions created during the hold per C", m.holdCreated, 0.5},
		{"executions completed during the hold per C", m.holdCompleted, 0.25},
		{"attempts per call", m.attempts, 20.0 / 8},
	} {
		if diff := c.got - c.want; diff > 1e-9 || diff < -1e-9 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestFindArmReadsVigilVariants(t *testing.T) {
	a, ok := findArm("vigil+cap=64+retry_ratio=1+queue_wait=60s+max_queue=512+cancel_after=30s+fifo+nocoalesce")
	if !ok {
		t.Fatal("variant not recognised")
	}
	cfg := configs.Default().Admission
	a.vigil(&cfg)
	if cfg.MaxInFlight != 64 || cfg.RetryRatio != 1 || cfg.MaxQueueWait != time.Minute || cfg.MaxQueue != 512 ||
		cfg.CancelAfter != 30*time.Second || cfg.Order != "fifo" || cfg.Coalesce {
		t.Errorf("variant config %+v", cfg)
	}
	for _, bad := range []string{"vigil+cap=-1", "vigil+retry_ratio=2", "vigil+speed=11", "nginx"} {
		if _, ok := findArm(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, name := range armNames() {
		if _, ok := findArm(name); !ok {
			t.Errorf("listed arm %q not found", name)
		}
	}
}
