package enginesim

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server runs an Engine on real listeners: the API (opened only once
// LoadTime has passed, so the port refuses connections while "loading", as
// vLLM's does) and the control listener (open at once).
type Server struct {
	Engine *Engine

	apiAddr  string
	ctrlLn   net.Listener
	api      *http.Server
	ctrl     *http.Server
	ready    chan struct{}
	closing  chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	apiLn    net.Listener
	err      error
	closeOne sync.Once
}

// Start builds an engine from cfg and serves it on addr ("127.0.0.1:0"
// picks a free port, which URL reports at once). The API listener opens
// after cfg.LoadTime (engine time, so LoadTime/Scale of wall time). The
// server stops when ctx is done or Close is called; on Crash it closes every
// listener, so its ports refuse connections.
func Start(ctx context.Context, addr string, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctrlAddr := cfg.ControlAddr
	if ctrlAddr == "" {
		ctrlAddr = "127.0.0.1:0"
	}
	// Bind the API address now, to learn the port and fail early; while
	// loading, the socket is closed again and reopened at the same port.
	apiLn, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	ctrlLn, err := net.Listen("tcp", ctrlAddr)
	if err != nil {
		apiLn.Close()
		return nil, err
	}
	s := &Server{
		Engine:  New(cfg),
		apiAddr: apiLn.Addr().String(),
		ctrlLn:  ctrlLn,
		ready:   make(chan struct{}),
		closing: make(chan struct{}),
	}
	s.api = &http.Server{Handler: s.Engine.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.ctrl = &http.Server{Handler: s.Engine.ControlHandler(), ReadHeaderTimeout: 10 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.ctrl.Serve(ctrlLn)
	}()

	load := cfg.wall(cfg.LoadTime)
	if load > 0 {
		apiLn.Close()
		apiLn = nil
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.run(ctx, apiLn, load)
	}()
	return s, nil
}

func (s *Server) run(ctx context.Context, ln net.Listener, load time.Duration) {
	if ln == nil {
		t := time.NewTimer(load)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			s.shutdown()
			return
		case <-s.closing:
			t.Stop()
			return
		case <-s.Engine.Crashed():
			t.Stop()
			s.shutdown()
			return
		}
		var err error
		ln, err = net.Listen("tcp", s.apiAddr)
		if err != nil {
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
			s.shutdown()
			return
		}
	}
	s.mu.Lock()
	s.apiLn = ln
	s.mu.Unlock()
	close(s.ready)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.api.Serve(ln)
	}()
	select {
	case <-ctx.Done():
	case <-s.closing:
		return
	case <-s.Engine.Crashed():
	}
	s.shutdown()
}

// shutdown closes the listeners and every connection, then stops the core.
func (s *Server) shutdown() {
	s.closeOne.Do(func() {
		close(s.closing)
		_ = s.api.Close()
		_ = s.ctrl.Close()
		s.Engine.Close()
	})
}

// URL is the API base URL, e.g. "http://127.0.0.1:8000" (no trailing slash).
func (s *Server) URL() string { return "http://" + s.apiAddr }

// Addr is the API host:port.
func (s *Server) Addr() string { return s.apiAddr }

// ControlURL is the fault-control base URL.
func (s *Server) ControlURL() string { return "http://" + s.ctrlLn.Addr().String() }

// Ready is closed once the API listener is open (after LoadTime).
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Done is closed once the server has shut down (Close, ctx, or a crash).
func (s *Server) Done() <-chan struct{} { return s.closing }

// Err reports why the API listener could not be reopened after loading.
func (s *Server) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close shuts everything down and waits for every goroutine to finish.
func (s *Server) Close() error {
	s.shutdown()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil && !errors.Is(s.err, net.ErrClosed) {
		return s.err
	}
	return nil
}
