package recovery

import "context"

// Turn is a held turn as journaled: enough for the next vigil to take it
// back (the etcd key and its lease).
type Turn struct {
	Key   string `json:"key"`
	Lease int64  `json:"lease"`
}

// TurnHold is a granted turn.
type TurnHold interface {
	Turn() Turn
	// Release gives the turn back. Failing, the turn still ends when its
	// lease expires.
	Release(ctx context.Context) error
}

// Coordinator grants the pool's turns (pool.coordination: etcd; package
// pool/coord implements it), so that at most max_concurrent_recoveries
// members of a pool are out of rotation at once.
type Coordinator interface {
	// Acquire waits for a turn until ctx ends; waiting is told who holds
	// the turns when this member queues. Any error means no turn.
	Acquire(ctx context.Context, incident string, waiting func(holders string)) (TurnHold, error)
	// Resume takes back a journaled turn; an error means it is gone
	// (expired with its lease) or etcd cannot say.
	Resume(ctx context.Context, t Turn) (TurnHold, error)
}
