package balancer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/vigil-dev/vigil/configs"
)

// HAProxySet drains one server through the runtime APIs of several
// HAProxy (load_balancer.haproxy.sockets): a pair behind keepalived or
// DNS, each of which must stop sending this host traffic. A change
// succeeds only when every one confirmed it; one that did not is the
// error, naming its socket, so the recovery refuses to restart a host a
// balancer still sends traffic to (and puts the others back).
type HAProxySet struct {
	members []*HAProxy
}

// NewHAProxySet builds one HAProxy drainer per socket of cfg.SocketList.
func NewHAProxySet(cfg configs.HAProxy) (*HAProxySet, error) {
	set := &HAProxySet{}
	for _, s := range cfg.SocketList() {
		one := cfg
		one.Socket, one.Sockets = s, nil
		h, err := NewHAProxy(one)
		if err != nil {
			return nil, err
		}
		set.members = append(set.members, h)
	}
	if len(set.members) == 0 {
		return nil, errors.New("haproxy: no runtime API socket configured")
	}
	return set, nil
}

func (s *HAProxySet) String() string {
	socks := make([]string, len(s.members))
	for i, m := range s.members {
		socks[i] = m.socket
	}
	return fmt.Sprintf("haproxy %s/%s on %d runtime APIs (%s)", s.members[0].backend, s.members[0].server,
		len(s.members), strings.Join(socks, ", "))
}

// each runs fn on every member at once and joins the failures, each
// named by its socket, with how many of all failed.
func (s *HAProxySet) each(what string, fn func(i int, h *HAProxy) error) error {
	errs := make([]error, len(s.members))
	var wg sync.WaitGroup
	for i, m := range s.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(i, m); err != nil {
				errs[i] = fmt.Errorf("%s: %w", m.socket, err)
			}
		}()
	}
	wg.Wait()
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("haproxy: %s: %d of %d runtime APIs did not confirm: %w", what, len(failed), len(s.members), errors.Join(failed...))
}

// Drain drains the server on every HAProxy.
func (s *HAProxySet) Drain(ctx context.Context) error {
	return s.each("drain", func(_ int, h *HAProxy) error { return h.Drain(ctx) })
}

// Ready puts the server back on every HAProxy.
func (s *HAProxySet) Ready(ctx context.Context) error {
	return s.each("ready", func(_ int, h *HAProxy) error { return h.Ready(ctx) })
}

// SetWeight sets the weight on every HAProxy.
func (s *HAProxySet) SetWeight(ctx context.Context, percent int) error {
	return s.each(fmt.Sprintf("weight %d%%", percent), func(_ int, h *HAProxy) error { return h.SetWeight(ctx, percent) })
}

// State reads every HAProxy and merges what they say: the sessions and
// queue are summed (each balancer's requests are in flight on the same
// engine); this host counts as drained only where every one drained it,
// another server as drained (the pool's lock) where any one did. One
// unreadable HAProxy is the error.
func (s *HAProxySet) State(ctx context.Context) (State, error) {
	states := make([]State, len(s.members))
	err := s.each("read state", func(i int, h *HAProxy) error {
		var err error
		states[i], err = h.State(ctx)
		return err
	})
	if err != nil {
		return State{}, err
	}
	return mergeStates(states), nil
}

func mergeStates(states []State) State {
	out := State{Known: true, Self: states[0].Self}
	out.Self.Sessions, out.Self.Queued = 0, 0
	statuses := []string{}
	for _, st := range states {
		self := st.Self
		out.Self.Sessions += self.Sessions
		out.Self.Queued += self.Queued
		out.Self.Drained = out.Self.Drained && self.Drained
		out.Self.Maint = out.Self.Maint || self.Maint
		out.Self.Weight = min(out.Self.Weight, self.Weight)
		if !slices.Contains(statuses, self.Status) {
			statuses = append(statuses, self.Status)
		}
	}
	out.Self.Status = strings.Join(statuses, "/")
	others := map[string]*ServerStatus{}
	for _, st := range states {
		for _, o := range st.Others {
			m := others[o.Server]
			if m == nil {
				c := o
				others[o.Server] = &c
				continue
			}
			m.Sessions += o.Sessions
			m.Queued += o.Queued
			m.Drained = m.Drained || o.Drained
			m.Maint = m.Maint || o.Maint
			if !strings.Contains(m.Status, o.Status) {
				m.Status += "/" + o.Status
			}
		}
	}
	for _, o := range others {
		out.Others = append(out.Others, *o)
	}
	sort.Slice(out.Others, func(i, j int) bool { return out.Others[i].Server < out.Others[j].Server })
	return out
}
