package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime/pprof"
	"time"

	"github.com/vigil-dev/vigil/admission"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/daemon"
)

// serveVigil is the vigil child: the admission limiter with its defaults
// (max_in_flight set to maxInFlight) in front of upstream, as "vigil run"
// serves it.
func serveVigil(ctx context.Context, listen, upstream string, maxInFlight int, profile string, stdout io.Writer) error {
	daemon.SetProcs() // as "vigil run" does
	u, err := url.Parse(upstream)
	if err != nil {
		return fmt.Errorf("vigil: upstream %q: %w", upstream, err)
	}
	cfg := configs.Default().Admission
	cfg.Listen = listen
	cfg.MaxInFlight = maxInFlight
	lim, err := admission.New(cfg, u, configs.Secret("sk-engine-bench"))
	if err != nil {
		return fmt.Errorf("vigil: %w", err)
	}
	defer lim.Close()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("vigil: listen: %w", err)
	}
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return fmt.Errorf("vigil: cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("vigil: cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Fprintln(stdout, "ready")
	err = lim.Serve(ctx, ln)
	// What the limiter did over the whole run: a queue here is latency the
	// table charges to the proxy.
	st := lim.Stats()
	fmt.Fprintf(os.Stderr, "overhead: vigil child (max_in_flight %d): %d admitted, %d queued, cap at the end %d\n",
		maxInFlight, st.Admitted, st.Queued, st.Cap)
	return err
}

// serveReverseProxy is the baseline child: net/http/httputil's reverse
// proxy with a transport like the limiter's and streaming flushes, and
// nothing else: what any Go proxy pays before doing anything of its own.
func serveReverseProxy(ctx context.Context, listen, upstream string, stdout io.Writer) error {
	u, err := url.Parse(upstream)
	if err != nil {
		return fmt.Errorf("reverseproxy: upstream %q: %w", upstream, err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) },
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 1024,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
		FlushInterval: -1,
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("reverseproxy: listen: %w", err)
	}
	// Read the body before proxying, as the limiter does (it validates the
	// JSON): handed the unread body, this proxy cut about 6% of the
	// streams short ("use of closed network connection" on the upstream
	// read), which is a standard-library matter beside the point here.
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		rp.ServeHTTP(w, r)
	})
	if err := serveChild(ctx, ln, h, stdout); err != nil {
		return fmt.Errorf("reverseproxy: %w", err)
	}
	return nil
}

// serveChild serves h on ln until ctx is done, once it has told the
// parent on stdout that it is ready.
func serveChild(ctx context.Context, ln net.Listener, h http.Handler, stdout io.Writer) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	fmt.Fprintln(stdout, "ready")
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
