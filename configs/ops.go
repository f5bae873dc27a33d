package configs

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

// Status is vigil's own localhost listener: /metrics, /status and the
// override API.
type Status struct {
	Listen string `yaml:"listen"`
	// AllowRemote permits a non-loopback Listen. The override API changes
	// limits without authentication, so reaching it from other hosts must
	// be a deliberate choice (e.g. behind a firewall that admits only the
	// pool's peers).
	AllowRemote bool `yaml:"allow_remote"`
	// RunbookURL is linked from the status page: where the operator who
	// opens it at 3 a.m. reads what to do ("" shows no link).
	RunbookURL string `yaml:"runbook_url"`
}

// Pool lists peer vigils, so pages and diagnose show the whole pool and
// the recovery guard never drains a member while another is drained.
type Pool struct {
	// Peers are other vigils' /status URLs.
	Peers   []string      `yaml:"peers"`
	Timeout time.Duration `yaml:"timeout"`
	// Coordination is none (the load balancer's state is the pool's lock)
	// or etcd (recoveries take turns through etcd; see Etcd).
	Coordination string   `yaml:"coordination"`
	Etcd         PoolEtcd `yaml:"etcd"`
	// MaxConcurrentRecoveries is how many members may be out of rotation
	// for a recovery at once (etcd coordination).
	MaxConcurrentRecoveries int `yaml:"max_concurrent_recoveries"`
	// MinServing refuses a drain that would leave fewer than this many
	// other members serving, by the peers' verdicts (0: off).
	MinServing int `yaml:"min_serving"`
	// DrainWithoutCoordinator lets vigil drain on the load balancer's pool
	// lock alone when etcd cannot be reached (default: refuse and page).
	DrainWithoutCoordinator bool `yaml:"drain_without_coordinator"`
	// Register (etcd coordination) puts this vigil's /status URL under
	// key_prefix/members/<node>, bound to a lease, so the peers find it
	// without a static list and drop it when it dies.
	Register bool `yaml:"register"`
	// StatusURL is the /status URL the peers reach this vigil at; empty
	// derives it from status.listen (see Config.PoolStatusURL).
	StatusURL string `yaml:"status_url"`
}

// PoolEtcd reaches the etcd cluster the pool coordinates through.
type PoolEtcd struct {
	// Endpoints are client URLs, e.g. https://10.0.0.5:2379.
	Endpoints []string `yaml:"endpoints"`
	// CAFile verifies etcd's certificate; CertFile and KeyFile
	// authenticate vigil (PEM files; all optional).
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// KeyPrefix is this pool's prefix: pools sharing an etcd use distinct
	// prefixes.
	KeyPrefix string `yaml:"key_prefix"`
	// LeaseTTL is how long a dead vigil's turn outlives it.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// Timeout bounds each etcd request; past it etcd is unreachable.
	Timeout time.Duration `yaml:"timeout"`
}

// Override is a temporary change with a mandatory expiry and reason; vigil
// restores the replaced value when it expires (docs/design.md section 8).
type Override struct {
	// Key is the config path changed, e.g. admission.max_in_flight.
	Key   string `yaml:"key"`
	Value string `yaml:"value"`
	// Until is an RFC 3339 time.
	Until  time.Time `yaml:"until"`
	Reason string    `yaml:"reason"`
}

// MaxOverride is how far in the future an override may expire.
const MaxOverride = 7 * 24 * time.Hour

func defaultStatus() Status { return Status{Listen: "127.0.0.1:9108"} }

func defaultPool() Pool {
	return Pool{Timeout: 3 * time.Second, Coordination: "none", MaxConcurrentRecoveries: 1, Register: true,
		Etcd: PoolEtcd{KeyPrefix: "/vigil/", LeaseTTL: 30 * time.Second, Timeout: 5 * time.Second}}
}

func (s *Status) validate(v *validator) {
	if s.RunbookURL != "" {
		v.httpURL("status.runbook_url", s.RunbookURL)
		// The page shows the link to whoever opens it.
		if u, err := url.Parse(s.RunbookURL); err == nil && u.User != nil {
			v.errorf("status.runbook_url", "must not carry credentials (user:password@): the status page shows it")
		}
	}
	if s.Listen == "" {
		return // disabled
	}
	v.listenAddr("status.listen", s.Listen, s.AllowRemote, "status.allow_remote",
		"the override API changes limits without authentication")
}

// listenAddr checks a listener address: host:port, and loopback unless
// allowRemote (named by allowKey) is set. why says what a remote client
// could do, for the error.
func (v *validator) listenAddr(path, addr string, allowRemote bool, allowKey, why string) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		v.errorf(path, "must be host:port: %v", err)
		return
	}
	if allowRemote {
		return
	}
	if err := CheckLoopback(addr); err != nil {
		v.errorf(path, "%v: %s; bind it to 127.0.0.1 or set %s: true", err, why, allowKey)
	}
}

// CheckLoopback refuses a listen address other hosts can reach: an empty
// host (every interface), a non-loopback IP, or a host name other than
// localhost (which may resolve to anything).
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q must be host:port: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%s is not a loopback address", addr)
}

func (p *Pool) validate(v *validator) {
	for i, u := range p.Peers {
		v.httpURL(indexPath("pool.peers", i), u)
	}
	v.positive("pool.timeout", p.Timeout)
	if p.StatusURL != "" {
		v.httpURL("pool.status_url", p.StatusURL)
	}
	if p.MinServing < 0 {
		v.errorf("pool.min_serving", "must be >= 0")
	} else if p.MinServing > len(p.Peers) && p.Coordination != "etcd" {
		// With etcd the members register themselves: how many there will
		// be is not known here.
		v.errorf("pool.min_serving", "is %d but only %d peers are listed in pool.peers: no drain could ever pass", p.MinServing, len(p.Peers))
	}
	switch p.Coordination {
	case "none":
		return
	case "etcd":
	default:
		v.errorf("pool.coordination", "must be none or etcd; got %q", p.Coordination)
		return
	}
	if p.MaxConcurrentRecoveries < 1 {
		v.errorf("pool.max_concurrent_recoveries", "must be >= 1")
	}
	e := p.Etcd
	if len(e.Endpoints) == 0 {
		v.errorf("pool.etcd.endpoints", "is required when pool.coordination is etcd")
	}
	for i, u := range e.Endpoints {
		v.httpURL(indexPath("pool.etcd.endpoints", i), u)
	}
	if !strings.HasPrefix(e.KeyPrefix, "/") {
		v.errorf("pool.etcd.key_prefix", "must start with /; got %q", e.KeyPrefix)
	}
	if e.LeaseTTL < 2*time.Second {
		v.errorf("pool.etcd.lease_ttl", "must be >= 2s (etcd's minimum lease); got %s", e.LeaseTTL)
	}
	v.positive("pool.etcd.timeout", e.Timeout)
	if (e.CertFile == "") != (e.KeyFile == "") {
		v.errorf("pool.etcd.cert_file", "cert_file and key_file go together")
	}
	for _, f := range []struct{ key, path string }{
		{"pool.etcd.ca_file", e.CAFile}, {"pool.etcd.cert_file", e.CertFile}, {"pool.etcd.key_file", e.KeyFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			v.errorf(f.key, "cannot read %s: %v", f.path, errors.Unwrap(err))
		}
	}
}

// ValidateOverride checks one override against the rules every override
// obeys, its value's type included; now is injected so tests need no
// clock. The same rules hold for the config file, the API and the CLI.
func ValidateOverride(o Override, now time.Time) error {
	_, err := overrideProblem(o, now)
	return err
}

// overrideProblem returns the first broken rule and the field it is about
// (key, value, reason or until), so a config error can name the field.
func overrideProblem(o Override, now time.Time) (field string, err error) {
	lk, known := Live(o.Key)
	known = known && lk.Overridable
	var verr error
	if known && o.Value != "" {
		verr = lk.Check(o.Value)
	}
	switch {
	case !known:
		return "key", fmt.Errorf("key %q cannot be overridden (allowed: %v)", o.Key, OverridableKeys)
	case o.Value == "":
		return "value", fmt.Errorf("value is required")
	case verr != nil:
		return "value", fmt.Errorf("value %q for %s: %w", o.Value, o.Key, verr)
	case o.Reason == "":
		return "reason", fmt.Errorf("reason is required: say why, so the next operator knows")
	case o.Until.IsZero():
		return "until", fmt.Errorf("until is required: every override expires")
	case !o.Until.After(now):
		return "until", fmt.Errorf("until %s is in the past", o.Until.Format(time.RFC3339))
	case o.Until.Sub(now) > MaxOverride:
		return "until", fmt.Errorf("until %s is more than %s away", o.Until.Format(time.RFC3339), MaxOverride)
	}
	return "", nil
}

// validateOverrides checks the overrides written in the config file. One
// that has already expired is not an error (the file may simply be older
// than the override): it is skipped with a warning so vigil still starts,
// unless its key or value is wrong.
// Its value must also suit the rest of the file (a hang_after override
// must exceed the file's interval, as the key itself must).
func validateOverrides(v *validator, os []Override, c *Config) {
	for i, o := range os {
		path := indexPath("overrides", i)
		// A wrong key or value is an error even in an expired override:
		// the file is wrong, whatever the date.
		field, err := overrideProblem(o, v.now)
		if err != nil && (field == "key" || field == "value") {
			v.errorf(path+"."+field, "%v", err)
			continue
		}
		// Its value against the rest of the file (a hang_after within the
		// interval), as it would be set on the config in force.
		lk, _ := Live(o.Key)
		file := *c
		if serr := lk.set(&file, o.Value); serr != nil {
			v.errorf(path+".value", "%s %s %v", o.Key, o.Value, serr)
			continue
		}
		if !o.Until.IsZero() && !o.Until.After(v.now) {
			v.warnf(path, "expired at %s; ignored", o.Until.Format(time.RFC3339))
			continue
		}
		if err != nil {
			v.errorf(path+"."+field, "%v", err)
		}
	}
}

// PoolStatusURL is the /status URL this vigil registers for its peers
// (pool.register with etcd coordination): pool.status_url when set, else
// "http://" + status.listen + "/status", with an unspecified host (":9108",
// "0.0.0.0:9108") replaced by this host's name. "" when neither is set.
func (c *Config) PoolStatusURL() string {
	if c.Pool.StatusURL != "" {
		return c.Pool.StatusURL
	}
	if c.Status.Listen == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(c.Status.Listen)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if host, err = os.Hostname(); err != nil || host == "" {
			host = c.Node
		}
	}
	return "http://" + net.JoinHostPort(host, port) + "/status"
}

// validateRegistration checks what this vigil would register: something
// must serve /status, and a URL derived from a loopback listener is
// reachable from this host only, which is right for a pool on one machine
// (the tests, the demo) and wrong for any other, so it warns.
func (c *Config) validateRegistration(v *validator) {
	p := c.Pool
	if p.Coordination != "etcd" || !p.Register || p.StatusURL != "" {
		return
	}
	if c.Status.Listen == "" {
		v.errorf("pool.status_url", "is required with pool.register when status.listen is off: "+
			"the peers read this vigil's /status there (or set pool.register: false)")
		return
	}
	if CheckLoopback(c.Status.Listen) == nil {
		v.warnf("pool.status_url", "unset, so this vigil registers %s, which only this host can reach; "+
			"for a pool across hosts set pool.status_url (and status.listen with status.allow_remote)", c.PoolStatusURL())
	}
}
