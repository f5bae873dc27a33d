package alerts

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/slack-go/slack"

	"github.com/vigil-dev/vigil/configs"
)

// Webhook posts pages to a Slack incoming webhook. Webhooks cannot thread
// or edit, so every page is a message of its own (each names its node and
// state). The URL is a secret: it never appears in an error or a log.
type Webhook struct {
	url    configs.Secret
	client *http.Client
	redact redactor
}

// NewWebhook returns a webhook notifier for the resolved secret URL.
// client may be nil.
func NewWebhook(u configs.Secret, client *http.Client) (*Webhook, error) {
	parsed, err := url.Parse(u.Value())
	if err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
		// Not even the parse error: it quotes the URL.
		return nil, errors.New("alerts: webhook: alerts.webhook.url is not an http(s) URL")
	}
	return &Webhook{url: u, client: defaultClient(client), redact: newRedactor(u)}, nil
}

// Notify posts m. Head updates are skipped (a webhook cannot edit).
func (w *Webhook) Notify(ctx context.Context, m Message) (bool, error) {
	if m.Kind == KindHeadUpdate {
		return false, nil
	}
	blocks := slack.Blocks{BlockSet: m.Blocks()}
	err := slack.PostWebhookCustomHTTPContext(ctx, w.url.Value(), w.client, &slack.WebhookMessage{
		Text:   m.Fallback(),
		Blocks: &blocks,
	})
	if err == nil {
		return false, nil
	}
	if rl, ok := errors.AsType[*slack.RateLimitedError](err); ok {
		return true, w.redact.Error(fmt.Errorf("slack webhook: rate limited, retry after %s: %w", rl.RetryAfter, err))
	}
	if sc, ok := errors.AsType[slack.StatusCodeError](err); ok {
		// 4xx from a webhook: revoked, disabled or mistyped; retrying
		// cannot help. 5xx and 429 without Retry-After: Slack's side.
		return sc.Retryable(), w.redact.Error(fmt.Errorf("slack webhook: post: %w (check alerts.webhook.url)", err))
	}
	if ue, ok := errors.AsType[*url.Error](err); ok {
		// url.Error quotes the URL; rebuild the message without it.
		return true, w.redact.Error(fmt.Errorf("slack webhook: post to %s: %v", w.host(), ue.Err))
	}
	return true, w.redact.Error(fmt.Errorf("slack webhook: post to %s: %w", w.host(), err))
}

// host is the part of the webhook URL that is safe to show.
func (w *Webhook) host() string {
	u, err := url.Parse(w.url.Value())
	if err != nil {
		return "webhook"
	}
	return u.Scheme + "://" + u.Host + "/" + redacted
}
