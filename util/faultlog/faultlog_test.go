package faultlog

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// A fault every 2s for 50s and then a success: one line when it begins,
// one reminder with the count, one line when it clears.
func TestRepeatedFaultIsLoggedOnceThenRemindedWithACount(t *testing.T) {
	logger, hook := logtest.NewNullLogger()
	l := logrus.NewEntry(logger)
	now := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	f := &Fault{Every: 30 * time.Second, Now: func() time.Time { return now }}
	err := errors.New("state: write /var/lib/vigil/state.json: read-only file system")
	for i := 0; i < 25; i++ {
		f.Failed(l, logrus.ErrorLevel, err, "cannot persist state")
		now = now.Add(2 * time.Second)
	}
	f.OK(l, "state persisted again")
	f.OK(l, "state persisted again") // nothing was failing: no line
	es := hook.AllEntries()
	if len(es) != 3 {
		for _, e := range es {
			t.Log(e.Level, e.Message)
		}
		t.Fatalf("want 3 lines (first, reminder, cleared), got %d", len(es))
	}
	if es[0].Level != logrus.ErrorLevel || es[0].Message != "cannot persist state" {
		t.Errorf("first line: %v %q", es[0].Level, es[0].Message)
	}
	if es[1].Level != logrus.ErrorLevel || !strings.Contains(es[1].Message, "still failing: 16 attempts in 30s, 15 since the last line") {
		t.Errorf("reminder: %v %q", es[1].Level, es[1].Message)
	}
	if es[2].Level != logrus.InfoLevel || es[2].Message != "state persisted again (after 25 failed attempts over 50s)" {
		t.Errorf("cleared: %v %q", es[2].Level, es[2].Message)
	}
}
