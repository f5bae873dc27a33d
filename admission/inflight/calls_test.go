package inflight

import (
	"context"
	"errors"
	"testing"
)

// The longest prompt is of the calls still in flight, and a loss cuts
// only the calls that can move, with its cause.
func TestCallsFollowTheLongestPromptAndCutOnlyMovable(t *testing.T) {
	var f Calls
	if n, longest := f.Snapshot(); n != 0 || longest != 0 {
		t.Fatalf("empty: %d calls, longest %d", n, longest)
	}
	ctx, cut := context.WithCancelCause(context.Background())
	movable := f.Start(300, cut)
	fixed := f.Start(900, nil)
	f.Start(50, nil)
	if n, longest := f.Snapshot(); n != 3 || longest != 900 {
		t.Errorf("three in flight: %d calls, longest %d; want 3, 900", n, longest)
	}
	f.Done(fixed, false)
	if n, longest := f.Snapshot(); n != 2 || longest != 300 {
		t.Errorf("the longest done: %d calls, longest %d; want 2, 300", n, longest)
	}
	lost := errors.New("engine lost")
	f.InterruptAll(lost)
	if !errors.Is(context.Cause(ctx), lost) {
		t.Errorf("the movable call's cause %v, want %v", context.Cause(ctx), lost)
	}
	f.Done(movable, false)
	if n, _ := f.Snapshot(); n != 1 {
		t.Errorf("%d calls after the cut one is done, want 1 (a cut call counts until it is done)", n)
	}
}
