package coord

import (
	"slices"
	"strings"
	"sync"
)

// Directory is the member directory as one vigil holds it: the members
// registered now, and the members whose registration vanished. A
// registration vanishes when its vigil stops (revoked) or when its lease
// expires, and a lease expires too when the vigil is alive but cut off
// from etcd, maybe in the middle of a recovery with its host drained.
// Such a member still counts against max_concurrent_recoveries, so it is
// kept as gone until its /status, read again, says it is not drained (or
// cannot be read: a stopped vigil holds nothing).
type Directory struct {
	mu   sync.Mutex
	regs []Registered
	gone map[string]Registered
}

// Set replaces the registered members; those that were registered and
// are no longer become gone, those registered again stop being gone.
func (d *Directory) Set(regs []Registered) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gone == nil {
		d.gone = map[string]Registered{}
	}
	now := map[string]bool{}
	for _, r := range regs {
		now[r.Node] = true
		delete(d.gone, r.Node)
	}
	for _, r := range d.regs {
		if !now[r.Node] {
			d.gone[r.Node] = r
		}
	}
	d.regs = regs
}

// Registered is the members registered now, sorted by node.
func (d *Directory) Registered() []Registered {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.regs
}

// Gone is the members whose registration vanished and who were not
// forgotten since, sorted by node.
func (d *Directory) Gone() []Registered {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Registered, 0, len(d.gone))
	for _, r := range d.gone {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Registered) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// Forget drops a gone member: its /status said it holds no drain.
func (d *Directory) Forget(node string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.gone, node)
}
