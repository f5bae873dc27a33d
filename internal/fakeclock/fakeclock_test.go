package fakeclock

import (
	"testing"
	"time"
)

func TestAdvanceRunsDueTimersInOrderAndStopPrevents(t *testing.T) {
	c := New()
	start := c.Now()
	var ran []string
	c.AfterFunc(2*time.Second, func() { ran = append(ran, "2s") })
	c.AfterFunc(time.Second, func() { ran = append(ran, "1s") })
	stop := c.AfterFunc(1500*time.Millisecond, func() { ran = append(ran, "1.5s") })
	if !stop() || stop() {
		t.Fatal("stop: want true once, then false")
	}
	c.Advance(time.Second)
	if len(ran) != 1 || ran[0] != "1s" {
		t.Fatalf("after 1s ran %v", ran)
	}
	c.Advance(5 * time.Second)
	if len(ran) != 2 || ran[1] != "2s" {
		t.Fatalf("after 6s ran %v", ran)
	}
	if got := c.Now().Sub(start); got != 6*time.Second {
		t.Fatalf("now moved %v, want 6s", got)
	}
}
