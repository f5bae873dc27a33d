package coord

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// ErrUnavailable is wrapped by every error that comes from etcd not
// answering: the caller must not take it as permission to drain.
var ErrUnavailable = errors.New("etcd unavailable")

// ErrExpired is returned by Resume when the journaled hold's lease is gone:
// the hold ended with it, nothing is left to release.
var ErrExpired = errors.New("hold expired with its lease")

// Options configure a Semaphore.
type Options struct {
	Endpoints []string
	// TLS, when set, is used for every connection (see TLSFromFiles).
	TLS *tls.Config
	// Prefix is the key prefix of this pool (e.g. "/vigil/pool-a/"); the
	// holds live under Prefix+"recovery/".
	Prefix string
	// LeaseTTL bounds how long a dead vigil's hold outlives it.
	LeaseTTL time.Duration
	// Max is how many members may hold at once (max_concurrent_recoveries).
	Max int
	// Timeout bounds each etcd request: past it, etcd is unavailable.
	Timeout time.Duration
	// Node names the holder in the hold's value, for the others' pages.
	Node string
}

// Holder is one hold as stored in etcd.
type Holder struct {
	Node     string    `json:"node"`
	Incident string    `json:"incident"`
	Since    time.Time `json:"since"`
	Key      string    `json:"-"`
}

func (h Holder) String() string {
	return fmt.Sprintf("%s (incident %s, since %s)", h.Node, h.Incident, h.Since.UTC().Format(time.TimeOnly))
}

// Semaphore is a counting semaphore over one etcd key prefix: at most Max
// holds at once, granted in the order asked.
type Semaphore struct {
	opts   Options
	client *clientv3.Client
	prefix string
}

// New connects lazily: a pool whose etcd is down still builds, and each
// request fails with ErrUnavailable after Timeout.
func New(o Options) (*Semaphore, error) {
	if len(o.Endpoints) == 0 {
		return nil, errors.New("coord: no etcd endpoints")
	}
	if o.Max < 1 {
		o.Max = 1
	}
	if o.LeaseTTL < 2*time.Second {
		return nil, fmt.Errorf("coord: lease TTL %s is under etcd's minimum of 2s", o.LeaseTTL)
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Prefix == "" {
		o.Prefix = "/vigil/"
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints: o.Endpoints, TLS: o.TLS, DialTimeout: o.Timeout,
		// The client's own retries would stretch a dead etcd past Timeout.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("coord: etcd client for %s: %w", strings.Join(o.Endpoints, ","), err)
	}
	return &Semaphore{opts: o, client: c, prefix: strings.TrimSuffix(o.Prefix, "/") + "/recovery/"}, nil
}

// Close closes the client. Holds not released stay until their lease
// expires.
func (s *Semaphore) Close() error { return s.client.Close() }

// TLSFromFiles builds the client TLS config from PEM files: ca verifies
// etcd's certificate; cert and key (both or neither) authenticate vigil.
func TLSFromFiles(ca, cert, key string) (*tls.Config, error) {
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s: no PEM certificate in it", ca)
		}
		cfg.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return nil, errors.New("cert_file and key_file go together")
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("cert_file/key_file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

func (s *Semaphore) unavailable(what string, err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("%w at %s: %s: %v", ErrUnavailable, strings.Join(s.opts.Endpoints, ","), what, err)
}

// Hold is one granted place. It lasts until Release, or until its lease
// expires because vigil died or lost etcd for longer than the TTL.
type Hold struct {
	s       *Semaphore
	session *concurrency.Session
	Key     string
	Lease   int64
}

// Lost closes when the hold ended without Release: its lease was not
// renewed in time (etcd unreachable for a TTL) and may already be gone.
func (h *Hold) Lost() <-chan struct{} { return h.session.Done() }

// Release gives the place back at once (revoking the lease deletes the
// key). If etcd cannot be reached the hold still ends when the lease
// expires, so the error is only worth logging.
func (h *Hold) Release(ctx context.Context) error {
	h.session.Orphan()
	ctx, cancel := context.WithTimeout(ctx, h.s.opts.Timeout)
	defer cancel()
	if _, err := h.s.client.Revoke(ctx, clientv3.LeaseID(h.Lease)); err != nil {
		return h.s.unavailable("release "+h.Key+" (it expires with its lease)", err)
	}
	return nil
}

// Orphan stops renewing the lease without revoking it: the hold ends when
// the lease expires. For a vigil handing the hold over to its next run.
func (h *Hold) Orphan() { h.session.Orphan() }

// Acquire asks for a place and waits for it until ctx ends. waiting, if
// set, is told who holds the places each time this call finds itself
// queued behind them. An error wrapping ErrUnavailable means etcd did not
// answer (or the lease was lost while waiting); the place was not granted.
func (s *Semaphore) Acquire(ctx context.Context, incident string, waiting func([]Holder)) (*Hold, error) {
	tctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	lease, err := s.client.Grant(tctx, s.ttlSeconds())
	cancel()
	if err != nil {
		return nil, s.unavailable("grant a lease", err)
	}
	h, err := s.attach(lease.ID)
	if err != nil {
		return nil, err
	}
	granted := false
	defer func() {
		if !granted {
			// Give back the queue place; the lease would expire anyway.
			_ = h.Release(context.WithoutCancel(ctx))
		}
	}()
	h.Key = s.prefix + strconv.FormatInt(int64(lease.ID), 16)
	val, _ := json.Marshal(Holder{Node: s.opts.Node, Incident: incident, Since: time.Now()})
	tctx, cancel = context.WithTimeout(ctx, s.opts.Timeout)
	put, err := s.client.Put(tctx, h.Key, string(val), clientv3.WithLease(lease.ID))
	cancel()
	if err != nil {
		return nil, s.unavailable("put "+h.Key, err)
	}
	myRev := put.Header.Revision
	for {
		// Places go in the order asked: count the holds asked before mine.
		tctx, cancel = context.WithTimeout(ctx, s.opts.Timeout)
		ahead, err := s.client.Get(tctx, s.prefix, clientv3.WithPrefix(), clientv3.WithMaxCreateRev(myRev-1),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		cancel()
		if err != nil {
			return nil, s.unavailable("list holds", err)
		}
		if len(ahead.Kvs) < s.opts.Max {
			granted = true
			return h, nil
		}
		if waiting != nil {
			waiting(decode(ahead.Kvs[:s.opts.Max]))
		}
		if err := s.waitDelete(ctx, h, ahead.Header.Revision); err != nil {
			return nil, err
		}
	}
}

// waitDelete returns once a hold under the prefix is deleted after rev
// (or a while has passed: the list is read again either way).
func (s *Semaphore) waitDelete(ctx context.Context, h *Hold, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := s.client.Watch(wctx, s.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithFilterPut())
	recheck := time.NewTimer(s.opts.LeaseTTL / 2)
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-h.Lost():
			return s.unavailable("lease lost while waiting for a place", errors.New("not renewed within its TTL"))
		case <-recheck.C:
			return nil
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				return nil // read the list again; it reports etcd's state
			}
			if len(wr.Events) > 0 {
				return nil
			}
		}
	}
}

// ttlSeconds is LeaseTTL in whole seconds, rounded up: etcd's unit.
func (s *Semaphore) ttlSeconds() int64 {
	return int64((s.opts.LeaseTTL + time.Second - 1) / time.Second)
}

// attach keeps lease alive in a session. The session's own TTL option is
// not given: with a lease passed in it would serve only Session.Close,
// which a hold never calls (it orphans the session and revokes itself).
func (s *Semaphore) attach(lease clientv3.LeaseID) (*Hold, error) {
	sess, err := concurrency.NewSession(s.client, concurrency.WithLease(lease))
	if err != nil {
		return nil, s.unavailable("keep the lease alive", err)
	}
	return &Hold{s: s, session: sess, Lease: int64(lease)}, nil
}

// Resume takes back a hold a previous run of vigil journaled (its key and
// lease). If the lease is still alive the hold goes on, renewed from here;
// if it expired, ErrExpired: the place was given back by etcd and must be
// asked for again.
func (s *Semaphore) Resume(ctx context.Context, key string, lease int64) (*Hold, error) {
	tctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	ttl, err := s.client.TimeToLive(tctx, clientv3.LeaseID(lease))
	if err != nil {
		return nil, s.unavailable("look up lease "+strconv.FormatInt(lease, 16), err)
	}
	if ttl.TTL <= 0 {
		return nil, fmt.Errorf("coord: %s: %w", key, ErrExpired)
	}
	got, err := s.client.Get(tctx, key)
	if err != nil {
		return nil, s.unavailable("get "+key, err)
	}
	if len(got.Kvs) == 0 || got.Kvs[0].Lease != lease {
		return nil, fmt.Errorf("coord: %s: %w", key, ErrExpired)
	}
	h, err := s.attach(clientv3.LeaseID(lease))
	if err != nil {
		return nil, err
	}
	h.Key = key
	return h, nil
}

// Holders lists the granted holds, oldest first.
func (s *Semaphore) Holders(ctx context.Context) ([]Holder, error) {
	tctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	resp, err := s.client.Get(tctx, s.prefix, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(int64(s.opts.Max)))
	if err != nil {
		return nil, s.unavailable("list holds", err)
	}
	return decode(resp.Kvs), nil
}

func decode(kvs []*mvccpb.KeyValue) []Holder {
	out := make([]Holder, 0, len(kvs))
	for _, kv := range kvs {
		var h Holder
		if json.Unmarshal(kv.Value, &h) != nil || h.Node == "" {
			h.Node = "?"
		}
		h.Key = string(kv.Key)
		out = append(out, h)
	}
	return out
}

// TurnQueue is the pool's turns as etcd holds them: the members holding
// one and those waiting for one, each in the order they asked.
type TurnQueue struct {
	Max     int      `json:"max"`
	Holding []Holder `json:"holding"`
	Waiting []Holder `json:"waiting"`
}

// Queue reads the holds and the places asked for, oldest first: the first
// Max hold a turn, the others wait in that order (Acquire grants them so).
func (s *Semaphore) Queue(ctx context.Context) (TurnQueue, error) {
	tctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	resp, err := s.client.Get(tctx, s.prefix, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return TurnQueue{}, s.unavailable("list holds", err)
	}
	all := decode(resp.Kvs)
	k := min(s.opts.Max, len(all))
	return TurnQueue{Max: s.opts.Max, Holding: all[:k], Waiting: all[k:]}, nil
}
