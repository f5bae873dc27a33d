package engineloss

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// fakeCall is a cut call's execution: its client's context, and what of
// its answer was sent.
type fakeCall struct {
	ctx     context.Context
	started bool
	header  http.Header
	whole   bool
	buf     []byte
}

func (c fakeCall) Context() context.Context { return c.ctx }
func (c fakeCall) Started() bool            { return c.started }
func (c fakeCall) Header() http.Header      { return c.header }
func (c fakeCall) Whole() bool              { return c.whole }
func (c fakeCall) Buffered() []byte         { return c.buf }

type fakeHolder struct{ held, bytes int64 }

func (h *fakeHolder) CountHeld()        { h.held++ }
func (h *fakeHolder) HoldBytes(n int64) { h.bytes += n }

// TestMoveTo: where a cut call goes next, by what of it was sent and what
// the pool offers.
func TestMoveTo(t *testing.T) {
	left, cancel := context.WithCancel(context.Background())
	cancel()
	sseHeader := http.Header{"Content-Type": {"text/event-stream"}}
	peers := []Peer{{Node: "b", URL: "http://b"}, {Node: "c", URL: "http://c"}}
	for _, tc := range []struct {
		name     string
		call     fakeCall
		rl       Relay
		peers    []Peer
		wantKind MoveKind
		wantWhy  string
		wantPeer string // "": the engine
	}{
		{"its client left", fakeCall{ctx: left}, Relay{}, peers, MoveStop, "", ""},
		{"unsent: the first peer", fakeCall{}, Relay{}, peers, MoveSend, "", "b"},
		{"a peer tried: the next", fakeCall{}, Relay{PeersTried: 1}, peers, MoveSend, "", "c"},
		{"every peer tried: the engine", fakeCall{}, Relay{PeersTried: 2}, peers, MoveSend, "", ""},
		{"moved in: never to a peer", fakeCall{}, Relay{MovedIn: true}, peers, MoveSend, "", ""},
		{"too many moves", fakeCall{}, Relay{Moves: 2}, peers, MoveLost, LossMoves, ""},
		{"a plain answer begun", fakeCall{started: true, header: http.Header{}}, Relay{}, peers, MoveLost, LossUnaryBegun, ""},
		{"a stream not all buffered", fakeCall{started: true, header: sseHeader}, Relay{}, peers, MoveLost, LossTooLong, ""},
		{"a stream finished: only its end", fakeCall{started: true, header: sseHeader, whole: true,
			buf: sse(`{"id":"c1","choices":[{"index":0,"text":"x","finish_reason":"stop"}]}`)}, Relay{}, peers, MoveEnd, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.call.ctx == nil {
				tc.call.ctx = context.Background()
			}
			h := &fakeHolder{}
			m := Mover{MaxMoves: 2, Peers: func() []Peer { return tc.peers }, Out: &Outage{}, Holder: h}
			rl := tc.rl
			mv := m.MoveTo(tc.call, &rl)
			if mv.Kind != tc.wantKind || mv.Why != tc.wantWhy {
				t.Fatalf("move %d (%q), want %d (%q)", mv.Kind, mv.Why, tc.wantKind, tc.wantWhy)
			}
			if mv.Kind != MoveSend {
				return
			}
			got := ""
			if mv.Peer != nil {
				got = mv.Peer.Node
			}
			if got != tc.wantPeer {
				t.Fatalf("sent to %q, want %q", got, tc.wantPeer)
			}
			if tc.wantPeer == "" && (h.held != 1 || !rl.Held) {
				t.Fatalf("held counted %d (relay held %v), want once", h.held, rl.Held)
			}
			if h.bytes != 0 {
				t.Fatalf("%d bytes still held against the queue", h.bytes)
			}
		})
	}
}

// TestRelayRequest: a call sent again to a peer carries where it came
// from and how long its home would hold it; to the engine, the engine's
// header; a moved call's header tells its wait.
func TestRelayRequest(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/v1/completions?x=1", nil)
	r.Header.Set("Authorization", "Bearer client")
	rl := NewRelay(r, r.Header.Clone(), []byte("{}"), "node-a", func(h http.Header) http.Header {
		h.Set("Authorization", "Bearer engine")
		return h
	})
	peer := rl.Request(context.Background(), &Peer{Node: "b", URL: "http://b/"}, "", rl.Body, 3*time.Second)
	if peer.URL.String() != "http://b/v1/completions?x=1" || peer.Header.Get(MovedFromHeader) != "node-a" ||
		peer.Header.Get("Authorization") != "Bearer client" {
		t.Fatalf("to the peer: %s %v", peer.URL, peer.Header)
	}
	if got := MovedWait(peer); got != 3*time.Second {
		t.Fatalf("moved wait %s, want 3s", got)
	}
	eng := rl.Request(context.Background(), nil, "http://engine/v1/completions?x=1", rl.Body, time.Second)
	if eng.Header.Get("Authorization") != "Bearer engine" || eng.Header.Get(MovedWaitHeader) != "" || eng.ContentLength != 2 {
		t.Fatalf("to the engine: %v (length %d)", eng.Header, eng.ContentLength)
	}
}
