package alerts

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/slack-go/slack"

	"github.com/vigil-dev/vigil/configs"
)

// Slack posts pages with a bot token: chat.postMessage for an incident's
// head, replies in its thread (thread_ts), and, with update_head,
// chat.update of the head with the latest state.
type Slack struct {
	api        *slack.Client
	channel    string
	updateHead bool
	redact     redactor
}

// NewSlack returns a Slack bot notifier. cfg.Token must be resolved;
// cfg.APIURL overrides Slack's API base (a trailing "/" is added if
// missing, as slack-go needs one). client may be nil.
func NewSlack(cfg configs.SlackAlerts, client *http.Client) (*Slack, error) {
	if cfg.Token.Value() == "" {
		return nil, errors.New("alerts: slack: no bot token (alerts.slack.token)")
	}
	if cfg.Channel == "" {
		return nil, errors.New("alerts: slack: no channel (alerts.slack.channel)")
	}
	opts := []slack.Option{slack.OptionHTTPClient(defaultClient(client))}
	if cfg.APIURL != "" {
		u, err := url.Parse(cfg.APIURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("alerts: slack: api_url %q is not an http(s) URL", cfg.APIURL)
		}
		base := cfg.APIURL
		if !strings.HasSuffix(base, "/") {
			base += "/"
		}
		opts = append(opts, slack.OptionAPIURL(base))
	}
	return &Slack{
		api:        slack.New(cfg.Token.Value(), opts...),
		channel:    cfg.Channel,
		updateHead: cfg.UpdateHead,
		redact:     newRedactor(cfg.Token),
	}, nil
}

// Notify delivers m; see Post.
func (s *Slack) Notify(ctx context.Context, m Message) (bool, error) {
	_, retry, err := s.Post(ctx, m)
	return retry, err
}

// Post delivers m and returns the ts of the posted message. A reply goes
// into its incident's thread when m.ThreadTS is known, else to the
// channel on its own (its text names node and state, so it still reads).
// A head update edits the head when update_head is on and the head's ts
// is known, and is otherwise a no-op.
func (s *Slack) Post(ctx context.Context, m Message) (string, bool, error) {
	opts := []slack.MsgOption{
		slack.MsgOptionText(m.Fallback(), true),
		slack.MsgOptionBlocks(m.Blocks()...),
		slack.MsgOptionDisableLinkUnfurl(),
	}
	if m.Kind == KindHeadUpdate {
		if !s.updateHead || m.ThreadTS == "" {
			return "", false, nil
		}
		_, ts, _, err := s.api.UpdateMessageContext(ctx, s.channel, m.ThreadTS, opts...)
		if err != nil {
			retry, err := s.classify("update head message in", err)
			return "", retry, err
		}
		return ts, false, nil
	}
	if m.Reply() && m.ThreadTS != "" {
		opts = append(opts, slack.MsgOptionTS(m.ThreadTS))
	}
	_, ts, err := s.api.PostMessageContext(ctx, s.channel, opts...)
	if err != nil {
		retry, err := s.classify("post to", err)
		return "", retry, err
	}
	return ts, false, nil
}

// Slack API errors worth retrying: Slack's side, not ours.
var slackTransient = map[string]bool{
	"ratelimited":         true,
	"internal_error":      true,
	"fatal_error":         true,
	"service_unavailable": true,
	"request_timeout":     true,
}

// What an operator should check for the API errors that mean our config
// is wrong. Retrying those only adds noise.
var slackHints = map[string]string{
	"invalid_auth":      "the bot token was rejected; check alerts.slack.token",
	"not_authed":        "no bot token was sent; check alerts.slack.token",
	"account_inactive":  "the bot token belongs to a deactivated account; check alerts.slack.token",
	"token_revoked":     "the bot token was revoked; check alerts.slack.token",
	"token_expired":     "the bot token expired; check alerts.slack.token",
	"channel_not_found": "no such channel, or the bot cannot see it; check alerts.slack.channel and invite the bot",
	"not_in_channel":    "the bot is not in the channel; invite it",
	"is_archived":       "the channel is archived; check alerts.slack.channel",
	"missing_scope":     "the bot token lacks the chat:write scope",
	"restricted_action": "the workspace does not let the bot post in this channel",
}

// classify turns a slack-go error into retry-or-not and an error that
// names the channel (never the token).
func (s *Slack) classify(what string, err error) (bool, error) {
	prefix := fmt.Sprintf("slack: %s channel %s", what, s.channel)
	if rl, ok := errors.AsType[*slack.RateLimitedError](err); ok {
		return true, s.redact.Error(fmt.Errorf("%s: rate limited, retry after %s: %w", prefix, rl.RetryAfter, err))
	}
	if sc, ok := errors.AsType[slack.StatusCodeError](err); ok {
		return sc.Retryable(), s.redact.Error(fmt.Errorf("%s: %w", prefix, err))
	}
	if api, ok := errors.AsType[slack.SlackErrorResponse](err); ok {
		if hint, ok := slackHints[api.Err]; ok {
			return false, s.redact.Error(fmt.Errorf("%s: %s: %s", prefix, api.Err, hint))
		}
		return slackTransient[api.Err], s.redact.Error(fmt.Errorf("%s: %w", prefix, err))
	}
	// Anything else is the network or the context: worth another try.
	return true, s.redact.Error(fmt.Errorf("%s: %w", prefix, err))
}
