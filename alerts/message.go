package alerts

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackutilsx"

	"github.com/vigil-dev/vigil/util/humanize"
)

// Kind says what a page is, which decides where it goes (head of a thread
// or a reply) and what the outbox drops first when it is full.
type Kind string

// The kinds of page.
const (
	// KindHead opens an incident's thread.
	KindHead Kind = "head"
	// KindChange is a thread reply announcing a change of state.
	KindChange Kind = "change"
	// KindUpdate is a thread reply with fresher evidence, same state.
	KindUpdate Kind = "update"
	// KindStep is a thread reply for one recovery step.
	KindStep Kind = "step"
	// KindResolve is the thread reply that closes the incident.
	KindResolve Kind = "resolve"
	// KindHeadUpdate rewrites the head message with the latest state
	// (chat.update); only Slack with update_head acts on it.
	KindHeadUpdate Kind = "head_update"
	// KindNotice is a standalone message outside any incident (overrides,
	// the retry-storm alarm, the daily digest).
	KindNotice Kind = "notice"
	// KindDropped is the note, sent before the next page, of how many pages
	// the full outbox dropped.
	KindDropped Kind = "dropped"
)

// tier orders kinds by how much losing one costs: when the outbox is full
// the oldest page of the lowest tier goes first. Heads and resolves go
// last: without them a thread has no start or no end.
func (k Kind) tier() int {
	switch k {
	case KindUpdate, KindHeadUpdate:
		return 0
	case KindHead, KindResolve, KindDropped:
		return 2
	default:
		return 1
	}
}

// Severity sets the log level of a page and its emphasis.
type Severity string

// The severities.
const (
	SeverityCritical Severity = "critical" // hung, down: vigil acts
	SeverityWarning  Severity = "warning"  // saturated, misconfigured, unknown, failed steps
	SeverityInfo     Severity = "info"     // steps, resolves, notices
)

// Field is one labelled value shown beside a page's text.
type Field struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Message is one page. It is plain data so the outbox can persist it; the
// Block Kit form is built from it at delivery (Blocks).
type Message struct {
	// Seq orders the outbox; pages are delivered in Seq order.
	Seq  uint64 `json:"seq"`
	Kind Kind   `json:"kind"`
	// Incident is the thread key ("" for a standalone notice).
	Incident string `json:"incident,omitempty"`
	// ThreadTS is the Slack ts of the incident's head message, filled in by
	// the sender just before delivery of a reply or head update ("" if the
	// head was never posted to a threading notifier).
	ThreadTS string `json:"thread_ts,omitempty"`
	// Topic names a notice ("override", "retry_storm", "digest").
	Topic    string    `json:"topic,omitempty"`
	Severity Severity  `json:"severity"`
	At       time.Time `json:"at"`

	// Text is the plain-text page: what the log shows and Slack's
	// notification fallback.
	Text string `json:"text"`
	// Title is the header block (heads, changes, resolves); Body the main
	// section; Fields and Context the evidence around it.
	Title   string   `json:"title,omitempty"`
	Body    string   `json:"body,omitempty"`
	Fields  []Field  `json:"fields,omitempty"`
	Context []string `json:"context,omitempty"`

	// Delay is how late the page is delivered, set by the sender when an
	// outage held it back, so readers know the news is old.
	Delay time.Duration `json:"-"`
}

// Reply reports whether the page belongs under an incident's head message.
func (m Message) Reply() bool {
	return m.Incident != "" && m.Kind != KindHead && m.Kind != KindHeadUpdate
}

// lateAfter: pages delivered later than this say so.
const lateAfter = time.Minute

// Fallback is the plain text to deliver: Text, marked when it is late.
func (m Message) Fallback() string {
	if m.Delay < lateAfter {
		return m.Text
	}
	return fmt.Sprintf("%s [queued %s, sent %s late]", m.Text, humanize.ClockUTC(m.At), humanize.Rough(m.Delay))
}

// Slack's limits on Block Kit text objects.
const (
	maxHeader  = 150
	maxSection = 3000
	maxFields  = 10
	maxField   = 2000
	maxContext = 10
)

// Blocks renders the page as Block Kit: a header (if the page has a
// title), the body, the evidence as fields, and a context line.
func (m Message) Blocks() []slack.Block {
	var blocks []slack.Block
	if m.Title != "" {
		blocks = append(blocks, slack.NewHeaderBlock(
			slack.NewTextBlockObject(slack.PlainTextType, truncate(m.Title, maxHeader), true, false)))
	}
	body := m.Body
	if body == "" {
		body = m.Text
	}
	blocks = append(blocks, slack.NewSectionBlock(
		slack.NewTextBlockObject(slack.MarkdownType, truncate(escape(body), maxSection), false, false), nil, nil))
	if len(m.Fields) > 0 {
		var fields []*slack.TextBlockObject
		for _, f := range m.Fields {
			if len(fields) == maxFields {
				break
			}
			text := fmt.Sprintf("*%s*\n%s", escape(f.Name), escape(f.Value))
			fields = append(fields, slack.NewTextBlockObject(slack.MarkdownType, truncate(text, maxField), false, false))
		}
		blocks = append(blocks, slack.NewSectionBlock(nil, fields, nil))
	}
	context := m.Context
	if m.Delay >= lateAfter {
		context = append(context[:len(context):len(context)],
			fmt.Sprintf("queued %s, sent %s late: Slack was unreachable", humanize.ClockUTC(m.At), humanize.Rough(m.Delay)))
	}
	if len(context) > 0 {
		var elems []slack.MixedElement
		for _, c := range context {
			if len(elems) == maxContext {
				break
			}
			elems = append(elems, slack.NewTextBlockObject(slack.MarkdownType, truncate(escape(c), maxSection), false, false))
		}
		blocks = append(blocks, slack.NewContextBlock("", elems...))
	}
	return blocks
}

// escape makes text safe for Slack mrkdwn: &, < and > are control
// characters there.
func escape(s string) string { return slackutilsx.EscapeMessage(s) }

// truncate cuts s to at most n runes, marking the cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return strings.TrimSpace(string(r[:n-1])) + "…"
}
