package alerts

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/configs"
)

// Notifier delivers one page. It says whether a failed delivery is worth
// retrying (a network error, a 5xx, a 429) or not (a bad token, a missing
// channel), in the shape of Alertmanager's notifiers. An error carrying a
// server-requested wait (Slack's 429 Retry-After) is honoured by the
// sender. Errors never contain a secret.
type Notifier interface {
	Notify(ctx context.Context, m Message) (retry bool, err error)
}

// Threader is a Notifier that threads replies: Post returns the ts of the
// message it posted, which the pager remembers for the incident's head and
// hands back in Message.ThreadTS for every reply.
type Threader interface {
	Notifier
	Post(ctx context.Context, m Message) (ts string, retry bool, err error)
}

// NewNotifier builds the notifier the config asks for: slack (bot token),
// webhook, or log. client may be nil (a client with a 15 s timeout is
// used); log receives the log notifier's pages.
func NewNotifier(cfg configs.Alerts, log *logrus.Entry, client *http.Client) (Notifier, error) {
	switch cfg.Kind {
	case "slack":
		return NewSlack(cfg.Slack, client)
	case "webhook":
		return NewWebhook(cfg.Webhook.URL, client)
	case "log", "":
		return NewLog(log), nil
	default:
		return nil, fmt.Errorf("alerts: unknown notifier kind %q (want slack, webhook or log)", cfg.Kind)
	}
}

// defaultClient bounds every call to Slack: a hung connection must not
// hold the outbox forever.
func defaultClient(c *http.Client) *http.Client {
	if c != nil {
		return c
	}
	return &http.Client{Timeout: 15 * time.Second}
}

// LogNotifier writes each page's plain text to the log. It is the default
// and what `vigil demo` uses. It never fails.
type LogNotifier struct {
	log *logrus.Entry
}

// NewLog returns a notifier that logs pages through log.
func NewLog(log *logrus.Entry) *LogNotifier {
	if log == nil {
		log = logrus.NewEntry(logrus.New())
	}
	return &LogNotifier{log: log}
}

// Notify logs the page: critical pages at warn level, others at info. Head
// updates are skipped: a log line cannot be edited, and the change that
// caused the update is logged as its own page.
func (l *LogNotifier) Notify(_ context.Context, m Message) (bool, error) {
	if m.Kind == KindHeadUpdate {
		return false, nil
	}
	e := l.log.WithField("page", string(m.Kind))
	if m.Incident != "" {
		e = e.WithField("incident", m.Incident)
	}
	if m.Topic != "" {
		e = e.WithField("topic", m.Topic)
	}
	if m.Delay >= lateAfter {
		e = e.WithField("late_seconds", int64(m.Delay/time.Second))
	}
	switch m.Severity {
	case SeverityCritical, SeverityWarning:
		e.Warn(m.Text)
	default:
		e.Info(m.Text)
	}
	return false, nil
}
