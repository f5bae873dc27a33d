package configs

import (
	"os"
	"time"
)

// Config is the whole of vigil's configuration. Each section lives in its
// own file beside this one, with its defaults and its validation.
type Config struct {
	// Node names this host in pages and in the pool view. Default: hostname.
	Node         string       `yaml:"node"`
	Engine       Engine       `yaml:"engine"`
	Watchdog     Watchdog     `yaml:"watchdog"`
	LoadBalancer LoadBalancer `yaml:"load_balancer"`
	Restart      Restart      `yaml:"restart"`
	Alerts       Alerts       `yaml:"alerts"`
	Admission    Admission    `yaml:"admission"`
	Status       Status       `yaml:"status"`
	// Overrides are temporary changes with an expiry; see overrides.go.
	Overrides []Override `yaml:"overrides"`
	Pool      Pool       `yaml:"pool"`

	// Source is the file the config was loaded from ("" for defaults).
	Source string `yaml:"-"`
	// Warnings are problems that do not stop vigil (e.g. an expired override).
	Warnings []string `yaml:"-"`
	// Lines holds the line of every key path the file set
	// ("watchdog.state_file"): what was written, not defaulted.
	Lines map[string]int `yaml:"-"`
}

// Default returns the configuration used when a key is absent: every
// section's defaults, aimed at the simulated engine on localhost.
func Default() Config {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	return Config{
		Node:         host,
		Engine:       defaultEngine(),
		Watchdog:     defaultWatchdog(),
		LoadBalancer: defaultLoadBalancer(),
		Restart:      defaultRestart(),
		Alerts:       defaultAlerts(),
		Admission:    defaultAdmission(),
		Status:       defaultStatus(),
		Pool:         defaultPool(),
	}
}

// Duration is a time.Duration that reads "15s", "3m" or "1h30m" in YAML.
// A bare number is rejected: "15" could mean seconds or nanoseconds.
type Duration = time.Duration

func (c *Config) validate(v *validator) {
	v.nonEmpty("node", c.Node)
	c.Engine.validate(v)
	c.Watchdog.validate(v)
	c.LoadBalancer.validate(v)
	c.Restart.validate(v, c.Watchdog)
	c.Alerts.validate(v)
	c.Admission.validate(v)
	c.Status.validate(v)
	validateOverrides(v, c.Overrides, c)
	c.Pool.validate(v)
	c.validateRegistration(v)
}

// resolveSecrets reads every *_file / *_env secret once, at load time, so a
// missing file is a config error and not a 3 a.m. surprise.
func (c *Config) resolveSecrets(v *validator) {
	var err error
	if c.Engine.APIKey, err = c.Engine.APIKeySource.Resolve(); err != nil {
		v.errorf("engine.api_key", "%v", err)
	}
	if c.Alerts.Slack.Token, err = c.Alerts.Slack.TokenSource.Resolve(); err != nil {
		v.errorf("alerts.slack.token", "%v", err)
	}
	if c.Alerts.Webhook.URL, err = c.Alerts.Webhook.URLSource.Resolve(); err != nil {
		v.errorf("alerts.webhook.url", "%v", err)
	}
}
