package balancer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

// Agent answers HAProxy's agent-check protocol: every poll (a TCP
// connection to agent-port) gets one line, "up ready N%" while the host
// should take traffic (N the ramp's weight) and "drain" while it is
// drained or held. Never "maint": vigil does not take a host out of a
// maintenance it did not put it in. Every HAProxy that polls gets the same
// answer, so a pair of balancers drains together with nothing exposed but
// a read-only port.
type Agent struct {
	adv    *advertised
	ln     net.Listener
	expect int
	within time.Duration

	mu sync.Mutex
	// polls holds, per poller, the version of the last answer it got.
	polls  map[string]uint64
	polled chan struct{} // closed and replaced at every poll
	conns  sync.WaitGroup
}

// agentIO bounds one poll: HAProxy sends its agent-send line (if any) at
// once and reads one line back.
const (
	agentAnswerTimeout = 2 * time.Second
	agentSendWait      = 200 * time.Millisecond
)

// NewAgent binds cfg.Listen; Serve answers on it.
func NewAgent(cfg configs.Agent, now func() time.Time) (*Agent, error) {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("agent: listen (load_balancer.agent.listen): %w", err)
	}
	return &Agent{adv: newAdvertised(now), ln: ln, expect: cfg.ExpectPolls, within: cfg.ExpectWithin,
		polls: map[string]uint64{}, polled: make(chan struct{})}, nil
}

// Addr is the address the agent listens on.
func (a *Agent) Addr() string { return a.ln.Addr().String() }

func (a *Agent) String() string { return "agent-check " + a.Addr() }

// Serve answers polls until ctx ends (nil) or the listener fails (the
// error).
func (a *Agent) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { a.ln.Close() })
	defer stop()
	defer a.conns.Wait()
	for {
		conn, err := a.ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("agent %s: %w", a.Addr(), err)
		}
		a.conns.Add(1)
		go func() {
			defer a.conns.Done()
			a.answer(conn)
		}()
	}
}

// answer writes the state's line, then reads what the poller sent to
// know who it was: its agent-send line, else its address.
func (a *Agent) answer(conn net.Conn) {
	defer conn.Close()
	ad := a.adv.read()
	_ = conn.SetWriteDeadline(time.Now().Add(agentAnswerTimeout))
	if _, err := conn.Write([]byte(agentLine(ad))); err != nil {
		return
	}
	id := ""
	_ = conn.SetReadDeadline(time.Now().Add(agentSendWait))
	if line, err := bufio.NewReader(conn).ReadString('\n'); err == nil || line != "" {
		id = strings.TrimSpace(line)
	}
	if id == "" {
		id, _, _ = net.SplitHostPort(conn.RemoteAddr().String())
	}
	a.mu.Lock()
	// Polls of one poller can finish out of order: keep the newest answer.
	a.polls[id] = max(a.polls[id], ad.Version)
	close(a.polled)
	a.polled = make(chan struct{})
	a.mu.Unlock()
}

func agentLine(ad advert) string {
	if ad.Out {
		return "drain\n"
	}
	return fmt.Sprintf("up ready %d%%\n", ad.Weight)
}

// Drain answers "drain" from now on. With expect_polls it returns once
// that many pollers have been told so, or fails naming those that were:
// a balancer that has not heard still sends traffic.
func (a *Agent) Drain(ctx context.Context) error {
	v := a.adv.drain()
	if a.expect <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, a.within)
	defer cancel()
	for {
		a.mu.Lock()
		heard := a.heardSince(v)
		wait := a.polled
		a.mu.Unlock()
		if len(heard) >= a.expect {
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			who := "none"
			if len(heard) > 0 {
				who = strings.Join(heard, ", ")
			}
			return fmt.Errorf("agent: drain: %d of %d expected pollers (load_balancer.agent.expect_polls) were told within %s; told: %s: %w",
				len(heard), a.expect, a.within, who, ctx.Err())
		}
	}
}

// heardSince lists the pollers answered at version v or later. Callers
// hold a.mu.
func (a *Agent) heardSince(v uint64) []string {
	var ids []string
	for id, got := range a.polls {
		if got >= v {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Pollers lists every poller the agent has answered, sorted.
func (a *Agent) Pollers() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.heardSince(0)
}

// Ready answers "up ready" again.
func (a *Agent) Ready(context.Context) error { a.adv.ready(); return nil }

// SetWeight sets the percentage the "up ready" answer carries.
func (a *Agent) SetWeight(_ context.Context, percent int) error {
	if _, err := a.adv.setWeight(percent); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}

// State is unknown: the agent is told nothing of the sessions.
func (a *Agent) State(context.Context) (State, error) { return State{}, nil }

// StartDrained answers drained from the first poll (see Server).
func (a *Agent) StartDrained() { a.adv.drain() }

// Close releases the listener.
func (a *Agent) Close() error {
	if err := a.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}
