package cronlog

import (
	"fmt"

	"github.com/robfig/cron/v3"
	"github.com/sirupsen/logrus"
)

// New adapts a logrus entry to cron's Logger, so cron's messages
// (a recovered panic, a skipped overlapping run) land in vigil's log with
// structured fields. cron's routine Info chatter (wake, run, next) goes to
// debug.
func New(l *logrus.Entry) cron.Logger { return cronLogger{l} }

type cronLogger struct{ l *logrus.Entry }

func (c cronLogger) Info(msg string, keysAndValues ...any) {
	c.l.WithFields(fields(keysAndValues)).Debug("cron: " + msg)
}

func (c cronLogger) Error(err error, msg string, keysAndValues ...any) {
	c.l.WithFields(fields(keysAndValues)).WithError(err).Error("cron: " + msg)
}

func fields(kv []any) logrus.Fields {
	f := logrus.Fields{}
	for i := 0; i+1 < len(kv); i += 2 {
		f[fmt.Sprint(kv[i])] = kv[i+1]
	}
	if len(kv)%2 == 1 {
		f["extra"] = kv[len(kv)-1]
	}
	return f
}
