package harness

import (
	"math"
	"math/rand/v2"
	"time"
)

// Phase is a stretch of open-loop Poisson arrivals at one rate.
type Phase struct {
	Name     string
	Duration time.Duration // engine time
	Rate     float64       // calls per engine second
}

// Arrival is one call's start, in engine time from the first phase's
// start, and the index of its phase.
type Arrival struct {
	At    time.Duration
	Phase int
}

// Arrivals draws Poisson arrival times over consecutive phases. A Poisson
// process is memoryless, so restarting the draw at each boundary is exact.
func Arrivals(rng *rand.Rand, phases []Phase) []Arrival {
	var out []Arrival
	var start time.Duration
	for i, p := range phases {
		end := start + p.Duration
		if p.Rate > 0 {
			t := start
			for {
				t += time.Duration(rng.ExpFloat64() / p.Rate * float64(time.Second))
				if t >= end {
					break
				}
				out = append(out, Arrival{At: t, Phase: i})
			}
		}
		start = end
	}
	return out
}

// PhaseStart is the engine time at which phase i begins.
func PhaseStart(phases []Phase, i int) time.Duration {
	var t time.Duration
	for _, p := range phases[:i] {
		t += p.Duration
	}
	return t
}

// LogNormal draws round(median * e^(sigma*N(0,1))) clamped to [1, max].
func LogNormal(rng *rand.Rand, median, sigma float64, max int) int {
	v := math.Round(median * math.Exp(sigma*rng.NormFloat64()))
	return int(math.Min(math.Max(v, 1), float64(max)))
}

// MeanLogNormal is the mean of LogNormal's draws (by numeric integration
// over the clamped distribution), for capacity arithmetic.
func MeanLogNormal(median, sigma float64, max int) float64 {
	const n = 20000
	sum := 0.0
	for i := range n {
		// Midpoint quantiles of N(0,1).
		z := math.Sqrt2 * math.Erfinv(2*(float64(i)+0.5)/n-1)
		v := math.Round(median * math.Exp(sigma*z))
		sum += math.Min(math.Max(v, 1), float64(max))
	}
	return sum / n
}
