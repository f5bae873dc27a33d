package cronlog

import (
	"errors"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

func TestCronMessagesReachLogrus(t *testing.T) {
	logger, hook := logtest.NewNullLogger()
	cl := New(logrus.NewEntry(logger))
	cl.Error(errors.New("boom"), "panic", "stack", "...")
	e := hook.LastEntry()
	if e == nil || e.Level != logrus.ErrorLevel || e.Message != "cron: panic" || e.Data["stack"] != "..." || e.Data[logrus.ErrorKey] == nil {
		t.Fatalf("cron error logged as %+v", e)
	}
}
