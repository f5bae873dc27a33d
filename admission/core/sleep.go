package core

import (
	"context"
	"time"
)

// Sleep waits d on c (tick is the caller's, reused across waits); false
// once ctx ends. The limiter's loops keep time by its Clock with it, so
// their intervals keep their proportion to a time-scaled engine's time.
func Sleep(ctx context.Context, c Clock, d time.Duration, tick chan struct{}) bool {
	stop := c.AfterFunc(d, func() {
		select {
		case tick <- struct{}{}:
		default:
		}
	})
	select {
	case <-ctx.Done():
		stop()
		return false
	case <-tick:
		return true
	}
}
