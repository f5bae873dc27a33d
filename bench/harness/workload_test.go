package harness

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestArrivalsFollowEachPhasesRate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ph := []Phase{{Duration: 1000 * time.Second, Rate: 2}, {Duration: 100 * time.Second, Rate: 20}, {Duration: 50 * time.Second}}
	a := Arrivals(rng, ph)
	count := make([]int, len(ph))
	for i, x := range a {
		count[x.Phase]++
		if i > 0 && x.At < a[i-1].At {
			t.Fatal("arrivals out of order")
		}
		if x.At < PhaseStart(ph, x.Phase) || x.At >= PhaseStart(ph, x.Phase)+ph[x.Phase].Duration {
			t.Fatalf("arrival at %v outside its phase %d", x.At, x.Phase)
		}
	}
	for i, p := range ph {
		want := p.Rate * p.Duration.Seconds()
		if math.Abs(float64(count[i])-want) > 4*math.Sqrt(want)+1 {
			t.Errorf("phase %d: %d arrivals, want about %.0f", i, count[i], want)
		}
	}
}

func TestArrivalsAreTheSameForTheSameSeed(t *testing.T) {
	ph := []Phase{{Duration: 100 * time.Second, Rate: 3}}
	a := Arrivals(rand.New(rand.NewPCG(7, 7)), ph)
	b := Arrivals(rand.New(rand.NewPCG(7, 7)), ph)
	if !slices.Equal(a, b) {
		t.Fatal("same seed, different arrivals: arms would not see the same calls")
	}
}

func TestLogNormalHasItsMedianAndCap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	xs := make([]int, 20001)
	for i := range xs {
		xs[i] = LogNormal(rng, 300, 0.5, 1200)
		if xs[i] < 1 || xs[i] > 1200 {
			t.Fatalf("draw %d outside [1, 1200]", xs[i])
		}
	}
	slices.Sort(xs)
	if m := xs[len(xs)/2]; m < 290 || m > 310 {
		t.Errorf("median %d, want about 300", m)
	}
	if m := MeanLogNormal(300, 0.5, 1200); m < 335 || m > 345 {
		t.Errorf("mean %.1f, want about 300*e^(0.125) = 340", m)
	}
}

func TestPercentileIsNearestRank(t *testing.T) {
	xs := []time.Duration{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	for p, want := range map[float64]time.Duration{50: 5, 99: 10, 10: 1, 100: 10} {
		if got := Percentile(xs, p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("percentile of nothing is not 0")
	}
}

func TestScaledClockRunsFasterThanTheWall(t *testing.T) {
	c := NewScaledClock(1000)
	t0 := c.Now()
	fired := make(chan time.Time, 1)
	c.AfterFunc(20*time.Second, func() { fired <- c.Now() }) // 20 ms of wall time
	select {
	case at := <-fired:
		if el := at.Sub(t0); el < 20*time.Second || el > 5*time.Minute {
			t.Errorf("fired after %v of scaled time, want about 20 s", el)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("20 s of scaled time took over 2 s of wall time")
	}
}
