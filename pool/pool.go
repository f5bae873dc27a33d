package pool

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Doc is the part of a vigil's GET /status JSON that the pool view reads;
// the status package produces it and anything else in the document is
// ignored, so either side can grow without breaking the other:
//
//	{
//	  "node": "node1",
//	  "verdict": {"state": "saturated", "evidence": {"waiting": 40, "running": 12}},
//	  "recovery": {"drained": true}
//	}
//
// recovery.drained is true while vigil holds this host drained at the load
// balancer (the recovery guard's shared lock).
type Doc struct {
	Node string `json:"node"`
	// Admission is the peer's admission.listen ("" : its limiter is off).
	Admission string `json:"admission,omitempty"`
	Verdict   struct {
		State    string `json:"state"`
		Evidence struct {
			Waiting float64 `json:"waiting"`
			Running float64 `json:"running"`
		} `json:"evidence"`
	} `json:"verdict"`
	Recovery struct {
		Drained bool `json:"drained"`
	} `json:"recovery"`
}

// Member is one vigil as seen from here.
type Member struct {
	// URL is the /status URL it was read from ("" for self).
	URL string `json:"url,omitempty"`
	// Node is the peer's own name, or the URL's host when unreachable.
	Node    string  `json:"node"`
	State   string  `json:"state,omitempty"`
	Waiting float64 `json:"waiting"`
	Running float64 `json:"running"`
	// Drained: vigil holds this member drained at the load balancer.
	Drained bool `json:"drained"`
	// ProxyURL is its admission limiter's base URL, where calls cut from
	// a lost engine may move ("" : no limiter, or not reachable from
	// here: it listens on loopback on another host).
	ProxyURL string `json:"proxy_url,omitempty"`
	// Err is why the member could not be read; "" when it was.
	Err string `json:"error,omitempty"`
}

// Reachable reports whether the member's status was read.
func (m Member) Reachable() bool { return m.Err == "" }

// DefaultTimeout bounds one peer's fetch when the caller gives none.
const DefaultTimeout = 3 * time.Second

// maxDoc bounds what is read from a peer: a status document is a few KB.
const maxDoc = 1 << 20

var client = &http.Client{
	// Never follow a peer elsewhere; a redirect is a misconfigured URL.
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// Fetch reads every peer's /status at once, each bounded by timeout, and
// returns one Member per peer in the order given. It never fails as a
// whole: a peer that is slow, down or answers garbage is a Member with Err
// set, so one bad peer never hides the others.
func Fetch(ctx context.Context, peers []string, timeout time.Duration) []Member {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	out := make([]Member, len(peers))
	var wg sync.WaitGroup
	for i, peer := range peers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			out[i] = fetchOne(ctx, peer, timeout)
		})
	}
	wg.Wait()
	return out
}

func fetchOne(ctx context.Context, peer string, timeout time.Duration) Member {
	m := Member{URL: peer, Node: hostOf(peer)}
	fail := func(format string, args ...any) Member {
		m.Err = fmt.Sprintf(format, args...)
		return m
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, peer, nil)
	if err != nil {
		return fail("bad peer URL: %v", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fail("%s", describe(err, timeout))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fail("GET %s: HTTP %d", peer, resp.StatusCode)
	}
	var doc Doc
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxDoc)).Decode(&doc); err != nil {
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return fail("%s", describe(err, timeout))
		}
		return fail("GET %s: not a vigil status document: %v", peer, err)
	}
	if doc.Node != "" {
		m.Node = doc.Node
	}
	m.State = doc.Verdict.State
	m.Waiting = doc.Verdict.Evidence.Waiting
	m.Running = doc.Verdict.Evidence.Running
	m.Drained = doc.Recovery.Drained
	m.ProxyURL = proxyURL(peer, doc.Admission)
	return m
}

// proxyURL is where a peer's limiter listening on listen is reached,
// given the /status URL it was read from: its own address when it names
// one, else the status URL's host. A limiter on loopback is reachable
// only from the same host.
func proxyURL(statusURL, listen string) string {
	if listen == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(listen)
	u, uerr := url.Parse(statusURL)
	if err != nil || uerr != nil || port == "" {
		return ""
	}
	ip := net.ParseIP(host)
	switch {
	case host == "" || (ip != nil && ip.IsUnspecified()):
		host = u.Hostname()
	case isLoopback(host) && !isLoopback(u.Hostname()):
		return ""
	}
	return "http://" + net.JoinHostPort(host, port)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// describe turns a transport error into a short reason for a page.
func describe(err error, timeout time.Duration) string {
	var nerr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &nerr) && nerr.Timeout():
		return fmt.Sprintf("timeout after %s", timeout)
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	return err.Error()
}

func hostOf(peer string) string {
	u, err := url.Parse(peer)
	if err != nil || u.Host == "" {
		return peer
	}
	return u.Host
}

// Summarize is the one-line pool view for pages and diagnose, self first:
// "pool: 3 members — node1 SATURATED 40 waiting, node2 healthy 2 waiting,
// node3 unreachable". States other than healthy and loading are in
// capitals, the way an operator scans for trouble.
func Summarize(self Member, peers []Member) string {
	parts := make([]string, 0, 1+len(peers))
	for _, m := range append([]Member{self}, peers...) {
		parts = append(parts, describeMember(m))
	}
	noun := "members"
	if len(parts) == 1 {
		noun = "member"
	}
	return fmt.Sprintf("pool: %d %s — %s", len(parts), noun, strings.Join(parts, ", "))
}

func describeMember(m Member) string {
	if !m.Reachable() {
		return m.Node + " unreachable"
	}
	state := m.State
	switch state {
	case "":
		state = "unknown"
	case "healthy", "loading":
	default:
		state = strings.ToUpper(state)
	}
	s := fmt.Sprintf("%s %s %.0f waiting", m.Node, state, m.Waiting)
	if m.Drained {
		s += " (drained by vigil)"
	}
	return s
}

// AnotherDrained reports a peer that vigil holds drained at the load
// balancer, the first by node name so every member picks the same one. An
// unreachable peer's drain state is unknown and not counted here; the
// load balancer's own state, re-read after draining, is the real lock.
func AnotherDrained(peers []Member) (string, bool) {
	var drained []string
	for _, m := range peers {
		if m.Reachable() && m.Drained {
			drained = append(drained, m.Node)
		}
	}
	if len(drained) == 0 {
		return "", false
	}
	return slices.MinFunc(drained, cmp.Compare[string]), true
}
