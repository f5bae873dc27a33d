package alerts

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
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
	// source says where the token was read from ("file /run/...",
	// "environment variable SLACK_BOT_TOKEN"), for errors that must point
	// at it without showing it.
	source string
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
		source:     tokenSource(cfg.TokenSource),
	}, nil
}

// tokenSource names where alerts.slack.token was read from.
func tokenSource(src configs.SecretSource) string {
	switch {
	case src.File != "":
		return "alerts.slack.token (file " + src.File + ")"
	case src.Env != "":
		return "alerts.slack.token (environment variable " + src.Env + ")"
	}
	return "alerts.slack.token"
}

// ErrUnreachable marks a start check that could not get an answer from
// the notifier's service (network, 5xx, 429, Slack's own errors). That is
// a warning, not a reason to refuse to start: pages queue in the outbox
// until the service answers.
var ErrUnreachable = errors.New("notifier unreachable")

// Checker is a notifier that can check its credentials before the first
// page, so a wrong token stops vigil at start instead of silently losing
// every page of the first incident.
type Checker interface {
	// Check returns nil when the credentials work, an error wrapping
	// ErrUnreachable when the service could not be asked, and any other
	// error when the service refused them.
	Check(ctx context.Context) error
}

// Check calls auth.test with the bot token. An answer that rejects the
// token (invalid_auth, not_authed, account_inactive, token_revoked, ...)
// is an error naming where the token came from, never the token.
func (s *Slack) Check(ctx context.Context) error {
	_, err := s.api.AuthTestContext(ctx)
	if err == nil {
		return nil
	}
	if api, ok := errors.AsType[slack.SlackErrorResponse](err); ok && !slackTransient[api.Err] {
		hint, ok := slackHints[api.Err]
		if !ok {
			hint = "Slack refused the bot token"
		}
		hint = strings.TrimSuffix(hint, "; check alerts.slack.token")
		return fmt.Errorf("alerts: slack: auth.test with the bot token from %s failed: %s: %s", s.source, api.Err, hint)
	}
	if sc, ok := errors.AsType[slack.StatusCodeError](err); ok && !sc.Retryable() {
		// A 4xx other than 429 comes from the URL, not from Slack's mood.
		return s.redact.Error(fmt.Errorf("alerts: slack: auth.test: %w (check alerts.slack.api_url)", err))
	}
	// Scrubbed first, then wrapped: the scrubbed error keeps no chain.
	return fmt.Errorf("%w: %w", ErrUnreachable, s.redact.Error(fmt.Errorf("alerts: slack: auth.test: %w", err)))
}

// CheckNotifier checks n's credentials at start when n can (a Slack bot
// token): a refused credential is returned, to stop vigil with the reason;
// a service that cannot be reached is logged as a warning and nil is
// returned, since pages queue until it answers. It waits at most timeout.
func CheckNotifier(ctx context.Context, n Notifier, log *logrus.Entry, timeout time.Duration) error {
	c, ok := n.(Checker)
	if !ok {
		return nil
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	err := c.Check(ctx)
	if errors.Is(err, ErrUnreachable) {
		if log != nil {
			log.WithError(err).Warn("alerts: cannot check the notifier's credentials at start; pages will queue until it answers")
		}
		return nil
	}
	return err
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
			hint = strings.Replace(hint, "alerts.slack.token", s.source, 1)
			return false, s.redact.Error(fmt.Errorf("%s: %s: %s", prefix, api.Err, hint))
		}
		return slackTransient[api.Err], s.redact.Error(fmt.Errorf("%s: %w", prefix, err))
	}
	// Anything else is the network or the context: worth another try.
	return true, s.redact.Error(fmt.Errorf("%s: %w", prefix, err))
}
