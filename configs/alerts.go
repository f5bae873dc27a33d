package configs

import "time"

// Alerts says where pages go and how often (docs/design.md section 4).
type Alerts struct {
	// Kind: slack (bot token), webhook (Slack incoming webhook) or log.
	Kind    string       `yaml:"kind"`
	Slack   SlackAlerts  `yaml:"slack"`
	Webhook WebhookAlert `yaml:"webhook"`
	// UpdateEvery: evidence updates in an incident's thread at most this often.
	UpdateEvery time.Duration `yaml:"update_every"`
	// UnknownAfter: an unknown verdict pages only once it lasts this long,
	// and so does a standing condition (alerts.Pager.Conditions).
	UnknownAfter time.Duration `yaml:"unknown_after"`
	// ResolveAfter: an incident that needed no recovery (saturated,
	// unknown, misconfigured) resolves only once the engine has been
	// healthy this long, so an overload hovering at the threshold is one
	// incident, not a RESOLVED and a new page every few seconds. Hung and
	// down incidents resolve on their proof of progress instead.
	ResolveAfter time.Duration `yaml:"resolve_after"`
	// OutboxSize bounds pages queued while Slack is unreachable; the oldest
	// updates are dropped first and the count of dropped pages is reported.
	OutboxSize int `yaml:"outbox_size"`
	// Digest is a cron schedule for the daily digest ("" disables it).
	Digest string `yaml:"digest"`
}

// SlackAlerts posts with a bot token (chat.postMessage, threads, chat.update).
type SlackAlerts struct {
	TokenSource SecretSource `yaml:"token"`
	Token       Secret       `yaml:"-"`
	Channel     string       `yaml:"channel"`
	// APIURL overrides Slack's API base URL (tests, proxies).
	APIURL string `yaml:"api_url"`
	// UpdateHead edits the incident's head message with the latest state.
	UpdateHead bool `yaml:"update_head"`
}

// WebhookAlert posts to a Slack incoming webhook. The URL is a secret.
type WebhookAlert struct {
	URLSource SecretSource `yaml:"url"`
	URL       Secret       `yaml:"-"`
}

func defaultAlerts() Alerts {
	return Alerts{
		Kind:         "log",
		UpdateEvery:  10 * time.Minute,
		UnknownAfter: 5 * time.Minute,
		ResolveAfter: time.Minute,
		OutboxSize:   500,
		Digest:       "0 9 * * *",
	}
}

func (a *Alerts) validate(v *validator) {
	switch a.Kind {
	case "log":
	case "slack":
		if !a.Slack.TokenSource.IsSet() {
			v.errorf("alerts.slack.token", "file or env is required when kind is slack")
		}
		v.secretSource("alerts.slack.token", a.Slack.TokenSource)
		v.nonEmpty("alerts.slack.channel", a.Slack.Channel)
		if a.Slack.APIURL != "" {
			v.httpURL("alerts.slack.api_url", a.Slack.APIURL)
		}
	case "webhook":
		if !a.Webhook.URLSource.IsSet() {
			v.errorf("alerts.webhook.url", "file or env is required when kind is webhook")
		}
		v.secretSource("alerts.webhook.url", a.Webhook.URLSource)
	default:
		v.errorf("alerts.kind", "must be one of slack, webhook, log; got %q", a.Kind)
	}
	v.positive("alerts.update_every", a.UpdateEvery)
	nonNegative(v, "alerts.unknown_after", a.UnknownAfter, "")
	nonNegative(v, "alerts.resolve_after", a.ResolveAfter, "")
	if a.OutboxSize < 1 {
		v.errorf("alerts.outbox_size", "must be >= 1")
	}
	if a.Digest != "" {
		v.cronSpec("alerts.digest", a.Digest)
	}
}
