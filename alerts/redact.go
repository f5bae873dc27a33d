package alerts

import (
	"errors"
	"net/url"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/vigil-dev/vigil/configs"
)

const redacted = "<redacted>"

// redactor removes secrets from text bound for a page, a log line or an
// error. Pages are built from strings other packages produce (reasons,
// step details, error texts), so every one is scrubbed before it leaves.
type redactor struct {
	replacer *strings.Replacer
}

func newRedactor(secrets ...configs.Secret) redactor {
	var pairs []string
	add := func(s string) {
		if s != "" {
			pairs = append(pairs, s, redacted)
		}
	}
	for _, s := range secrets {
		v := s.Value()
		add(v)
		// A webhook URL's secret is its path: scrub it on its own too, and
		// in its escaped form, in case an error prints only part of it.
		if u, err := url.Parse(v); err == nil && u.Host != "" && len(u.Path) >= 8 {
			add(u.Path)
			add(u.EscapedPath())
			add(url.QueryEscape(v))
		}
	}
	if len(pairs) == 0 {
		return redactor{}
	}
	// Longest first: the full URL must go before its path.
	sortPairsByLength(pairs)
	return redactor{replacer: strings.NewReplacer(pairs...)}
}

func sortPairsByLength(pairs []string) {
	for i := 2; i < len(pairs); i += 2 {
		for j := i; j >= 2 && len(pairs[j]) > len(pairs[j-2]); j -= 2 {
			pairs[j], pairs[j-2] = pairs[j-2], pairs[j]
			pairs[j+1], pairs[j-1] = pairs[j-1], pairs[j+1]
		}
	}
}

// String returns s with every secret replaced by "<redacted>".
func (r redactor) String(s string) string {
	if r.replacer == nil {
		return s
	}
	return r.replacer.Replace(s)
}

// Message scrubs every text of a page.
func (r redactor) Message(m Message) Message {
	if r.replacer == nil {
		return m
	}
	m.Text = r.String(m.Text)
	m.Title = r.String(m.Title)
	m.Body = r.String(m.Body)
	fields := make([]Field, len(m.Fields))
	for i, f := range m.Fields {
		fields[i] = Field{Name: r.String(f.Name), Value: r.String(f.Value)}
	}
	m.Fields = fields
	ctx := make([]string, len(m.Context))
	for i, c := range m.Context {
		ctx[i] = r.String(c)
	}
	m.Context = ctx
	return m
}

// Error returns err with its text scrubbed. The result deliberately does
// not wrap err: the wrapped error's own text would still hold the secret.
// What the sender needs from the chain (Slack's Retry-After) is kept.
func (r redactor) Error(err error) error {
	if err == nil {
		return nil
	}
	e := &sendError{msg: r.String(err.Error())}
	if rl, ok := errors.AsType[*slack.RateLimitedError](err); ok {
		e.retryAfter = rl.RetryAfter
	}
	if se, ok := errors.AsType[*sendError](err); ok && e.retryAfter == 0 {
		e.retryAfter = se.retryAfter
	}
	return e
}

// sendError is a delivery failure with its text already scrubbed.
type sendError struct {
	msg        string
	retryAfter time.Duration
}

func (e *sendError) Error() string { return e.msg }

// RetryAfter is how long the server asked us to wait (0 if it did not).
func (e *sendError) RetryAfter() time.Duration { return e.retryAfter }

// retryAfter extracts a server-requested wait from a notifier's error.
func retryAfter(err error) time.Duration {
	if rl, ok := errors.AsType[*slack.RateLimitedError](err); ok {
		return rl.RetryAfter
	}
	var ra interface{ RetryAfter() time.Duration }
	if errors.As(err, &ra) {
		return ra.RetryAfter()
	}
	return 0
}
