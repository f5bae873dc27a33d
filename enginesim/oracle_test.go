package enginesim

import (
	"testing"
	"time"
)

// oracleConfig is a small engine for the oracle's tests: 16 seats, short
// answers, so a burst's whole sweep takes milliseconds.
func oracleConfig() (Config, Workload) {
	cfg := DefaultConfig()
	cfg.MaxNumSeqs = 16
	return cfg, Workload{PromptTokens: 250, OutputTokens: 20}
}

// loneAnswer is how long cfg takes to answer one call of w alone: its
// prefill, then one decode step per further token.
func loneAnswer(cfg Config, w Workload) time.Duration {
	return MeasureTTFT(cfg, w) + time.Duration(w.OutputTokens-1)*(cfg.StepOverhead+cfg.SeqCost)
}

// evenBurst is calls evenly spaced at rate per second for d.
func evenBurst(rate float64, d time.Duration) []time.Duration {
	var at []time.Duration
	for i := range int(rate*d.Seconds() + 0.5) {
		at = append(at, time.Duration(float64(i)/rate*float64(time.Second)))
	}
	return at
}

func TestDeliverCountsAnswersCompleteByTheirDeadline(t *testing.T) {
	cfg, w := oracleConfig()
	lone := loneAnswer(cfg, w)
	one := []time.Duration{time.Second}
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		a       Admission
		want    int
	}{
		{"straight, its answer at the deadline", lone, Admission{}, 1},
		{"straight, a nanosecond short", lone - 1, Admission{}, 0},
		{"admitted, its answer at the deadline", lone, Admission{Seats: 1}, 1},
		{"admitted, a nanosecond short", lone - 1, Admission{Seats: 1}, 0},
		{"margin as long as the answer", lone, Admission{Seats: 1, Margin: lone}, 1},
		{"margin longer than the time left: dropped", lone, Admission{Seats: 1, Margin: lone + 1}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Deliver(cfg, w, one, tc.timeout, tc.a); got != tc.want {
				t.Fatalf("lone answer %v, timeout %v, %+v: delivered %d, want %d", lone, tc.timeout, tc.a, got, tc.want)
			}
		})
	}
}

// One seat, three calls at once whose timeout fits one answer and a
// half. The first is answered; the second is aborted at its deadline;
// the third, sent then, cannot finish either. With a margin of one answer
// the admission drops the second and third instead of sending them; still
// one.
func TestDeliverAbortsAtTheDeadline(t *testing.T) {
	cfg, w := oracleConfig()
	lone := loneAnswer(cfg, w)
	at := []time.Duration{0, 0, 0}
	timeout := lone + lone/2
	for _, m := range []time.Duration{0, lone} {
		if got := Deliver(cfg, w, at, timeout, Admission{Seats: 1, Margin: m}); got != 1 {
			t.Errorf("margin %v: delivered %d, want 1", m, got)
		}
	}
	// Two seats: both of the first two are answered together in time.
	if got := Deliver(cfg, w, at, timeout, Admission{Seats: 2}); got != 2 {
		t.Errorf("two seats: delivered %d, want 2", got)
	}
	// The abort frees the seat for a third call arriving at the second's
	// deadline; an engine that does not abort makes it wait for the
	// second's end, and it misses its own.
	timeout = lone + lone/5
	at = []time.Duration{0, 0, timeout}
	for _, abort := range []bool{true, false} {
		cfg.AbortOnDisconnect = abort
		want := map[bool]int{true: 2, false: 1}[abort]
		if got := Deliver(cfg, w, at, timeout, Admission{Seats: 1}); got != want {
			t.Errorf("AbortOnDisconnect %v: delivered %d, want %d", abort, got, want)
		}
	}
}

func TestBestDelivered(t *testing.T) {
	cfg, w := oracleConfig()
	c := MeasureCapacity(cfg, w)
	lone := loneAnswer(cfg, w)
	const burst, timeout = 2 * time.Second, time.Second
	// bound: the engine's work. Each call answered costs at least its
	// share of a full batch's steps, 1/c, and all of them are done between
	// the first arrival and the last deadline. (capacity x (burst +
	// timeout - a lone answer) is not one: work done before the first
	// answer is out counts after it, and this search beats it by a call.)
	bound := int(c * (burst + timeout).Seconds())
	for _, tc := range []struct {
		name    string
		load    float64
		timeout time.Duration
		check   func(t *testing.T, n, best, straight, fifo int)
	}{
		{"a burst the engine absorbs", 0.5, timeout, func(t *testing.T, n, best, straight, fifo int) {
			if best != n || straight != n || fifo != n {
				t.Errorf("of %d calls: best %d, straight %d, FIFO %d: want all", n, best, straight, fifo)
			}
		}},
		{"a timeout shorter than one answer", 1, lone - time.Millisecond, func(t *testing.T, n, best, straight, fifo int) {
			if best != 0 || straight != 0 || fifo != 0 {
				t.Errorf("of %d calls: best %d, straight %d, FIFO %d: want none", n, best, straight, fifo)
			}
		}},
		{"twice the capacity", 2, timeout, func(t *testing.T, n, best, straight, fifo int) {
			if best > bound || best > n {
				t.Errorf("of %d calls best %d, above the bound %d", n, best, bound)
			}
			// The engine completes c a second once its first batch is
			// out (seats/c in): the best admission gets near that.
			if floor := int(c * (burst + timeout - time.Duration(float64(cfg.MaxNumSeqs)/c*float64(time.Second))).Seconds() * 0.97); best < floor {
				t.Errorf("of %d calls best %d, want at least %d", n, best, floor)
			}
			if best <= straight || best <= fifo {
				t.Errorf("of %d calls best %d, straight %d, FIFO with no drop %d: want more than both", n, best, straight, fifo)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := evenBurst(tc.load*c, burst)
			best, a := BestDelivered(cfg, w, at, tc.timeout)
			if got := Deliver(cfg, w, at, tc.timeout, a); got != best {
				t.Errorf("BestDelivered says %d with %+v, Deliver %d", best, a, got)
			}
			if a.Seats != cfg.MaxNumSeqs || a.Margin < 0 || a.Margin > tc.timeout || a.LateFrom > 0 && a.LateMargin >= a.Margin {
				t.Errorf("best admission %+v: want %d seats, a margin within the timeout and any late one below it", a, cfg.MaxNumSeqs)
			}
			straight := Deliver(cfg, w, at, tc.timeout, Admission{})
			fifo := Deliver(cfg, w, at, tc.timeout, Admission{Seats: cfg.MaxNumSeqs})
			t.Logf("%d calls at %.1f/s (capacity %.1f/s), timeout %v: best %d with %+v, straight %d, FIFO %d, bound %d",
				len(at), tc.load*c, c, tc.timeout, best, a, straight, fifo, bound)
			tc.check(t, len(at), best, straight, fifo)
		})
	}
}

func BenchmarkBestDelivered(b *testing.B) {
	cfg, w := oracleConfig()
	c := MeasureCapacity(cfg, w)
	at := evenBurst(2*c, 2*time.Second)
	var n int
	for b.Loop() {
		n, _ = BestDelivered(cfg, w, at, time.Second)
	}
	b.ReportMetric(float64(n), "delivered")
}
