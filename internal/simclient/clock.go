package simclient

import (
	"context"
	"time"
)

// Clock reads engine time: wall time since Start multiplied by Scale.
type Clock struct {
	Start time.Time
	Scale float64
}

// NewClock starts a clock now. A scale below or at zero means 1.
func NewClock(scale float64) *Clock {
	if !(scale > 0) {
		scale = 1
	}
	return &Clock{Start: time.Now(), Scale: scale}
}

// Now is the engine time elapsed since the clock started.
func (c *Clock) Now() time.Duration { return c.Engine(time.Since(c.Start)) }

// Wall converts an engine duration into the wall duration it takes.
func (c *Clock) Wall(d time.Duration) time.Duration { return time.Duration(float64(d) / c.Scale) }

// Engine converts a wall duration into engine time.
func (c *Clock) Engine(d time.Duration) time.Duration { return time.Duration(float64(d) * c.Scale) }

// SleepUntil waits until engine time t (returns at once if it has passed).
// It reports false if ctx ended first.
func (c *Clock) SleepUntil(ctx context.Context, t time.Duration) bool {
	return sleepWall(ctx, time.Until(c.Start.Add(c.Wall(t))))
}

// Sleep waits for engine duration d, or until ctx ends (false).
func (c *Clock) Sleep(ctx context.Context, d time.Duration) bool {
	return sleepWall(ctx, c.Wall(d))
}

func sleepWall(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
