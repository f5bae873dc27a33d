package engineloss

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MovedFromHeader marks a call one vigil moved to another (its value names
// the first): the receiving vigil never moves it on, so a call cannot go
// round a pool.
const MovedFromHeader = "X-Vigil-Moved-From"

// MovedWaitHeader tells the peer how long the moving vigil would hold the
// call itself (seconds): the peer's queue takes it only to answer it
// sooner (core.Request.MaxWait).
const MovedWaitHeader = "X-Vigil-Moved-Wait"

// AdmittedStatus is the informational answer a vigil sends a moved call
// the moment its queue admits it (102 Processing): the moving vigil then
// knows the peer runs it and no longer calls it home when its own engine
// is back (a plain answer sends nothing else before its end).
const AdmittedStatus = http.StatusProcessing

// Peer is another vigil's limiter a call may move to.
type Peer struct {
	// Node names it in pages and metrics; URL is its admission proxy's
	// base URL (http://host:port).
	Node, URL string
}

// Relay is one call's way to an engine: the body vigil holds and the
// headers to send it with, so it can be sent again, elsewhere, when the
// engine it ran on is lost.
type Relay struct {
	Method, URI    string // as the client sent them (path and query)
	Path, RawQuery string
	Body           []byte
	// Engine is the header for this vigil's engine (the engine's key
	// injected); Peer the one for a peer's limiter (the client's own key,
	// the peer injects its engine's).
	Engine, Peer http.Header
	Moves        int
	// MovedIn: the call came from another vigil; it moves no further.
	MovedIn bool
	// PeersTried counts the peers offered the call: each once, in the
	// order the pool gives them, then the call is held.
	PeersTried int
	Held       bool // counted once as held for the restarted engine
	// Recalled: a peer kept the call until this vigil's engine was back;
	// it goes to that engine, to no other peer.
	Recalled bool
}

// NewRelay reads what r needs to be sent, now and again: h is its header
// as it goes on, node this vigil's name, engineKey what sets the engine's
// key on a header.
func NewRelay(r *http.Request, h http.Header, body []byte, node string, engineKey func(http.Header) http.Header) *Relay {
	from := h.Get(MovedFromHeader)
	h.Del(MovedFromHeader)
	h.Del(MovedWaitHeader)
	rl := &Relay{Method: r.Method, URI: r.URL.RequestURI(), Path: r.URL.Path, RawQuery: r.URL.RawQuery,
		Body: body, MovedIn: from != "", Peer: h.Clone()}
	if from == "" {
		from = node
	}
	rl.Peer.Set(MovedFromHeader, from)
	rl.Engine = engineKey(h)
	return rl
}

// Request builds the send of body to peer, or to the engine at engineURL
// when peer is nil; wait is how long this vigil would hold the call.
func (rl *Relay) Request(ctx context.Context, peer *Peer, engineURL string, body []byte, wait time.Duration) *http.Request {
	target, h := engineURL, rl.Engine
	if peer != nil {
		target, h = strings.TrimSuffix(peer.URL, "/")+rl.URI, rl.Peer
	}
	req, _ := http.NewRequestWithContext(ctx, rl.Method, target, bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	if len(body) == 0 {
		req.Body = http.NoBody
	}
	req.Header = h.Clone()
	if peer != nil {
		req.Header.Set(MovedWaitHeader, strconv.FormatFloat(wait.Seconds(), 'f', 3, 64))
	}
	req.Host = ""
	return req
}

// MovedWait is the wait a moved call's home would hold it (0: unknown).
func MovedWait(r *http.Request) time.Duration {
	v, err := strconv.ParseFloat(r.Header.Get(MovedWaitHeader), 64)
	if err != nil || !(v > 0) || v > 24*3600 {
		return 0
	}
	return time.Duration(v * float64(time.Second))
}

// Move is what becomes of a call cut by a lost engine.
type Move struct {
	Kind MoveKind
	Peer *Peer // MoveSend: the peer to send to (nil: the engine)
	Body []byte
	Cont bool   // the stream had begun: splice the answer in after it
	Why  string // MoveLost: a Loss* code
}

// MoveKind says what to do with a cut call.
type MoveKind int

const (
	MoveSend MoveKind = iota // send Body to Peer
	MoveEnd                  // the stream had its whole answer: only its end is missing
	MoveLost                 // it cannot move: Why
	MoveStop                 // its clients left: nothing to do
)

// Call is the execution a cut call's answer goes into (calls.Execution).
type Call interface {
	Context() context.Context
	// Started: some of its answer was sent; Whole: all it sent is
	// buffered; Buffered is that.
	Started() bool
	Header() http.Header
	Whole() bool
	Buffered() []byte
}

// Holder is what a Mover asks of the limiter while it holds a call for
// the restarted engine.
type Holder interface {
	// CountHeld counts a call held (once per call).
	CountHeld()
	// HoldBytes adds n bytes (negative: releases them) held against the
	// queue's memory (max_queue_bytes).
	HoldBytes(n int64)
}

// Mover decides where calls cut by a lost engine go.
type Mover struct {
	MaxMoves int
	Peers    func() []Peer // nil: no pool
	Out      *Outage
	Holder   Holder
	// Now is the limiter's clock, to time a held call's wait (nil: not
	// timed).
	Now func() time.Time
}

// MoveTo decides where a call cut by a lost engine goes next, and with
// which body: a peer's limiter when one may take it, else the engine once
// it is ready again (the call is held here until then).
func (m Mover) MoveTo(ex Call, rl *Relay) Move {
	if ex.Context().Err() != nil {
		return Move{Kind: MoveStop}
	}
	mv := Move{Kind: MoveSend, Body: rl.Body, Cont: ex.Started()}
	if mv.Cont {
		if !strings.HasPrefix(strings.ToLower(ex.Header().Get("Content-Type")), "text/event-stream") {
			return Move{Kind: MoveLost, Why: LossUnaryBegun}
		}
		if !ex.Whole() {
			return Move{Kind: MoveLost, Why: LossTooLong}
		}
		s := ReadSoFar(ex.Buffered())
		if s.Finished && s.Why == "" {
			return Move{Kind: MoveEnd}
		}
		b, why := Continuation(rl.Path, rl.Body, s)
		if why != "" {
			return Move{Kind: MoveLost, Why: why}
		}
		mv.Body = b
	}
	rl.Moves++
	if rl.Moves > m.MaxMoves {
		return Move{Kind: MoveLost, Why: LossMoves}
	}
	if !rl.MovedIn && !rl.Recalled && m.Peers != nil {
		if ps := m.Peers(); rl.PeersTried < len(ps) {
			mv.Peer = &ps[rl.PeersTried]
			rl.PeersTried++
			return mv
		}
	}
	if !rl.Held {
		rl.Held = true
		m.Holder.CountHeld()
		m.Out.Note(func(f *Fate) { f.Held++ })
	}
	if ch := m.Out.WaitCh(); ch != nil {
		m.Out.Hold(1)
		m.Holder.HoldBytes(int64(len(mv.Body)))
		defer func() { m.Out.Hold(-1); m.Holder.HoldBytes(-int64(len(mv.Body))) }()
		var since time.Time
		if m.Now != nil {
			since = m.Now()
		}
		select {
		case <-ch:
			if m.Now != nil {
				m.Out.Released(m.Now().Sub(since))
			}
		case <-ex.Context().Done():
			return Move{Kind: MoveStop}
		}
	}
	return mv
}
