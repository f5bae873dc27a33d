package testinfra

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// LoadSpec is a closed-loop load: Clients clients POST Body (JSON) to URL,
// each sending its next call when its last one ended.
type LoadSpec struct {
	URL, Body string
	Clients   int
	// Timeout bounds one call.
	Timeout time.Duration
	// PauseAfterFailure is how long a client waits after a call that was
	// not answered 200, so that a server refusing at once (a drained
	// backend's 503) is not asked in a tight loop. Zero: no pause.
	PauseAfterFailure time.Duration
}

// Load is a running closed-loop load (StartLoad) and the calls it made.
type Load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	calls []Call
}

// Call is one finished call of a Load.
type Call struct {
	Start, End time.Time
	Code       int    // 0 when the call failed without an answer
	Err        string // why it failed without an answer, or in the body
	// Body is the start of the answer when it was not 200.
	Body string
}

// OK: answered 200, body read whole.
func (c Call) OK() bool { return c.Code == http.StatusOK && c.Err == "" }

func (c Call) String() string {
	at := c.Start.Format("15:04:05.000")
	if c.Err != "" {
		return fmt.Sprintf("started %s: %s", at, c.Err)
	}
	s := fmt.Sprintf("started %s: HTTP %d after %s", at, c.Code, c.End.Sub(c.Start).Round(time.Millisecond))
	if c.Body != "" {
		s += ": " + c.Body
	}
	return s
}

// StartLoad starts s's clients; they stop when the test ends (or at
// Stop). A call cut short by the stop is not recorded: it is not the
// server's doing.
func StartLoad(t testing.TB, s LoadSpec) *Load {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &Load{cancel: cancel}
	tr := &http.Transport{MaxIdleConnsPerHost: s.Clients}
	c := &http.Client{Transport: tr, Timeout: s.Timeout}
	for range s.Clients {
		l.wg.Go(func() {
			for ctx.Err() == nil {
				call := l.call(ctx, c, s)
				if ctx.Err() != nil {
					return
				}
				l.mu.Lock()
				l.calls = append(l.calls, call)
				l.mu.Unlock()
				if !call.OK() && s.PauseAfterFailure > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(s.PauseAfterFailure):
					}
				}
			}
		})
	}
	t.Cleanup(func() { l.Stop(); tr.CloseIdleConnections() })
	return l
}

func (l *Load) call(ctx context.Context, c *http.Client, s LoadSpec) Call {
	call := Call{Start: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, strings.NewReader(s.Body))
	if err != nil {
		call.Err, call.End = err.Error(), time.Now()
		return call
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err == nil {
		var body []byte
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		call.Code = resp.StatusCode
		if call.Code != http.StatusOK {
			call.Body = string(bytes.TrimSpace(body[:min(len(body), 200)]))
		}
	}
	call.End = time.Now()
	if err != nil {
		call.Err = err.Error()
	}
	return call
}

// Stop stops the clients and waits for them.
func (l *Load) Stop() {
	l.cancel()
	l.wg.Wait()
}

// Tally counts the finished calls that started in [from, to): those
// answered 200, and the others.
func (l *Load) Tally(from, to time.Time) (ok int, failed []Call) {
	return l.count(func(c Call) bool { return !c.Start.Before(from) && c.Start.Before(to) })
}

// Counts is Tally over every call finished so far.
func (l *Load) Counts() (ok int, failed []Call) {
	return l.count(func(Call) bool { return true })
}

func (l *Load) count(in func(Call) bool) (ok int, failed []Call) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.calls {
		if !in(c) {
			continue
		}
		if c.OK() {
			ok++
		} else {
			failed = append(failed, c)
		}
	}
	return ok, failed
}
