package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/overrides"
)

// Snapshot is the GET /status document. Its parts come from packages this
// one does not import, so they are any: each is marshalled as its owner
// defines it. Peer vigils read it through pool.Doc, which needs:
//
//   - Node;
//   - Verdict marshalling "state" and "evidence": {"waiting", "running"}
//     (watchdog.Verdict does);
//   - Recovery marshalling "drained": true while vigil holds this host
//     drained at the load balancer.
type Snapshot struct {
	Node    string    `json:"node"`
	Version string    `json:"version,omitempty"`
	At      time.Time `json:"at"`
	// DryRun: vigil only logs and pages what it would do.
	DryRun bool `json:"dry_run,omitempty"`
	// Engine is the engine's URL as pages show it (no credentials).
	Engine string `json:"engine,omitempty"`
	// Admission is admission.listen while the limiter is on: the pool's
	// peers move calls cut from their lost engines there.
	Admission string `json:"admission,omitempty"`
	// Started is when this vigil started, for its uptime.
	Started time.Time `json:"started,omitzero"`
	// Plan is what vigil does about a hung or down engine, as configured.
	Plan *Plan `json:"plan,omitempty"`
	// LastIncident is the last incident that resolved.
	LastIncident any `json:"last_incident,omitempty"`
	// RunbookURL is status.runbook_url, linked from the page.
	RunbookURL string `json:"runbook_url,omitempty"`
	Verdict    any    `json:"verdict,omitempty"`
	Incident   any    `json:"incident,omitempty"`
	Recovery   any    `json:"recovery,omitempty"`
	Limiter    any    `json:"limiter,omitempty"`
	Overrides  any    `json:"overrides,omitempty"`
	Capacity   any    `json:"capacity,omitempty"`
	Pool       any    `json:"pool,omitempty"`
	// Turns is the queue for the pool's turns to recover (coord.TurnQueue:
	// the members holding one, then those waiting in their order), with
	// pool.coordination etcd.
	Turns any `json:"turns,omitempty"`
	// Routing is the share of keyed retries that found their execution
	// here (routing.AffinityReport): low when the load balancer is not
	// key-affine.
	Routing any `json:"routing,omitempty"`
	// Config is the configuration in force (effective values, secrets
	// redacted), which after a reload may differ from the file.
	Config any `json:"config,omitempty"`
	// LimiterLoad is the limiter's side of the engine's load as the
	// watchdog reads it each cycle (watchdog.LimiterLoad), read at At: its
	// counts since it started of the calls the engine answered through it
	// and of the reads of those answers. `vigil diagnose` takes their
	// difference across its window, as the watchdog does across its
	// samples, to tell an API server starved under load from a wedged one.
	LimiterLoad any `json:"limiter_load,omitempty"`
}

// Plan is what recovery would do, from the config: the kinds an operator
// checks first, their targets, and the sentence the pages use.
type Plan struct {
	// Restart is restart.kind (docker, systemd, command or none);
	// RestartTarget what it restarts ("container vllm").
	Restart       string `json:"restart"`
	RestartTarget string `json:"restart_target,omitempty"`
	// LoadBalancer is load_balancer.kind (haproxy, http or none);
	// DrainTarget what a drain takes out of rotation.
	LoadBalancer string `json:"load_balancer"`
	DrainTarget  string `json:"drain_target,omitempty"`
	// Summary is what vigil will and will not do, in one or two
	// sentences (alerts.DescribeRecovery).
	Summary string `json:"summary,omitempty"`
}

// Overrides is the override manager as the API needs it
// (*overrides.Manager satisfies it).
type Overrides interface {
	Set(o configs.Override) error
	Clear(key string) (overrides.Active, error)
	List() []overrides.Active
}

// Options configures a Server.
type Options struct {
	// Listen is host:port (configs.Status.Listen); "" disables the
	// listener.
	Listen string
	// AllowRemote permits a non-loopback Listen. The override API changes
	// limits and has no authentication, so this must be a deliberate
	// choice (e.g. behind a firewall that only admits the pool).
	AllowRemote bool
	// Gatherer is served on /metrics; nil serves no /metrics.
	Gatherer prometheus.Gatherer
	// Snapshot builds the /status document; nil serves a minimal one.
	Snapshot func() Snapshot
	// Overrides backs the override API; nil answers 503 there.
	Overrides Overrides
	// Healthy is /healthz: nil or a nil error answers 200.
	Healthy func() error
	Log     *logrus.Entry
	// ReadHeaderTimeout bounds a slow client's headers (default 5 s).
	ReadHeaderTimeout time.Duration
	// Now stamps snapshots that carry no time; nil means time.Now.
	Now func() time.Time
}

// Server is the status listener.
type Server struct {
	opts    Options
	log     *logrus.Entry
	now     func() time.Time
	handler http.Handler
}

// maxRequestBody bounds an override request: a few hundred bytes in use.
const maxRequestBody = 64 << 10

// New builds the server; nothing listens until ListenAndServe or Serve.
func New(o Options) *Server {
	s := &Server{opts: o, log: o.Log, now: o.Now}
	if s.log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		s.log = logrus.NewEntry(l)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.opts.ReadHeaderTimeout <= 0 {
		s.opts.ReadHeaderTimeout = 5 * time.Second
	}
	mux := http.NewServeMux()
	if o.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{
			// A broken collector must not blank every other metric.
			ErrorHandling: promhttp.ContinueOnError,
		}))
	}
	mux.HandleFunc("GET /{$}", s.page) // the status page (page.go)
	mux.HandleFunc("GET /status", s.status)
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /overrides", s.listOverrides)
	mux.HandleFunc("POST /overrides", s.setOverride)
	mux.HandleFunc("DELETE /overrides/{key}", s.clearOverride)
	s.handler = mux
	return s
}

// Handler serves the endpoints, for tests and for embedding.
func (s *Server) Handler() http.Handler { return s.handler }

// Listen opens Options.Listen, refusing a non-loopback address unless
// AllowRemote is set.
func (s *Server) Listen() (net.Listener, error) {
	if !s.opts.AllowRemote {
		if err := checkLoopback(s.opts.Listen); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("status: listen %s: %w", s.opts.Listen, err)
	}
	return ln, nil
}

// ListenAndServe listens on Options.Listen and serves until ctx ends. An
// empty Listen disables the listener: it returns nil at once.
func (s *Server) ListenAndServe(ctx context.Context) error {
	if s.opts.Listen == "" {
		s.log.Info("status listener disabled (status.listen is empty)")
		return nil
	}
	ln, err := s.Listen()
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends, then shuts down gracefully (5 s).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	errLog := s.log.WriterLevel(logrus.WarnLevel)
	defer errLog.Close()
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(errLog, "status: ", 0),
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			s.log.WithError(err).Warn("status listener did not shut down cleanly")
		}
	}()
	s.log.WithField("listen", ln.Addr().String()).Info("status listener serving /metrics, /status, /healthz, /overrides")
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		<-stopped
		return nil
	}
	return fmt.Errorf("status: serve %s: %w", ln.Addr(), err)
}

// checkLoopback refuses addresses reachable from other hosts: an empty
// host (all interfaces), a non-loopback IP or a host name other than
// localhost. The config refuses them too; this guards other callers.
func checkLoopback(addr string) error {
	if err := configs.CheckLoopback(addr); err != nil {
		return fmt.Errorf("status.listen: %w; the override API changes limits without authentication, "+
			"so bind it to 127.0.0.1 or set status.allow_remote: true", err)
	}
	return nil
}

// snapshot is what /status and the page show: the daemon's snapshot,
// stamped, with the overrides in force.
func (s *Server) snapshot() Snapshot {
	var snap Snapshot
	if s.opts.Snapshot != nil {
		snap = s.opts.Snapshot()
	}
	if snap.At.IsZero() {
		snap.At = s.now().UTC()
	}
	if snap.Overrides == nil && s.opts.Overrides != nil {
		snap.Overrides = s.opts.Overrides.List()
	}
	return snap
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	snap := s.snapshot()
	writeJSON(w, http.StatusOK, snap)
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if s.opts.Healthy != nil {
		if err := s.opts.Healthy(); err != nil {
			http.Error(w, "unhealthy: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	io.WriteString(w, "ok\n")
}

func (s *Server) listOverrides(w http.ResponseWriter, r *http.Request) {
	if !s.haveOverrides(w) {
		return
	}
	writeJSON(w, http.StatusOK, s.opts.Overrides.List())
}

// overrideRequest is the POST /overrides body. Value may be a JSON string
// or a bare number or boolean ({"value": 64} is how people type it).
type overrideRequest struct {
	Key    string          `json:"key"`
	Value  json.RawMessage `json:"value"`
	Until  string          `json:"until"`
	Reason string          `json:"reason"`
}

func (s *Server) setOverride(w http.ResponseWriter, r *http.Request) {
	if !s.haveOverrides(w) {
		return
	}
	o, err := decodeOverride(http.MaxBytesReader(w, r.Body, maxRequestBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	log := s.log.WithFields(logrus.Fields{"key": o.Key, "value": o.Value, "remote": r.RemoteAddr})
	if err := s.opts.Overrides.Set(o); err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, overrides.ErrInvalid) {
			code = http.StatusBadRequest
		}
		log.WithError(err).WithField("status_code", code).Warn("override refused")
		writeError(w, code, err)
		return
	}
	for _, a := range s.opts.Overrides.List() {
		if a.Key == o.Key {
			writeJSON(w, http.StatusCreated, a)
			return
		}
	}
	// It expired or was cleared between Set and List; say what was set.
	writeJSON(w, http.StatusCreated, overrides.Active{Key: o.Key, Value: o.Value, Until: o.Until, Reason: o.Reason})
}

func decodeOverride(body io.Reader) (configs.Override, error) {
	var req overrideRequest
	dec := json.NewDecoder(body)
	// A misspelt "untill" must not quietly become an override without
	// an expiry; it is refused by name.
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return configs.Override{}, fmt.Errorf("%w: body: %v", overrides.ErrInvalid, err)
	}
	o := configs.Override{Key: req.Key, Reason: req.Reason}
	if req.Until != "" {
		t, err := time.Parse(time.RFC3339, req.Until)
		if err != nil {
			return o, fmt.Errorf("%w: until %q is not an RFC 3339 time such as 2025-06-01T18:00:00Z", overrides.ErrInvalid, req.Until)
		}
		o.Until = t
	}
	raw := strings.TrimSpace(string(req.Value))
	switch {
	case raw == "" || raw == "null":
	case raw[0] == '"':
		if err := json.Unmarshal(req.Value, &o.Value); err != nil {
			return o, fmt.Errorf("%w: value: %v", overrides.ErrInvalid, err)
		}
	case raw[0] == '{' || raw[0] == '[':
		return o, fmt.Errorf("%w: value must be a string, number or boolean", overrides.ErrInvalid)
	default:
		o.Value = raw // a number or a boolean, as written
	}
	return o, nil
}

func (s *Server) clearOverride(w http.ResponseWriter, r *http.Request) {
	if !s.haveOverrides(w) {
		return
	}
	key := r.PathValue("key")
	a, err := s.opts.Overrides.Clear(key)
	switch {
	case errors.Is(err, overrides.ErrNotActive):
		writeError(w, http.StatusNotFound, err)
		return
	case err != nil:
		s.log.WithError(err).WithField("key", key).Error("clearing an override failed")
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	s.log.WithFields(logrus.Fields{"key": key, "remote": r.RemoteAddr}).Info("override cleared through the API")
	writeJSON(w, http.StatusOK, a)
}

func (s *Server) haveOverrides(w http.ResponseWriter) bool {
	if s.opts.Overrides == nil {
		writeError(w, http.StatusServiceUnavailable, errors.New("the override API is not available in this vigil"))
		return false
	}
	return true
}

// errorBody is every error answer: {"error": "..."}.
type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, errorBody{Error: err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		code = http.StatusInternalServerError
		data, _ = json.Marshal(errorBody{Error: "encode response: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(append(data, '\n'))
}
