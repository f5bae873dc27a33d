package cli

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/internal/daemon"
	"github.com/vigil-dev/vigil/internal/testinfra"
)

// runningDaemon is the daemon `vigil run` runs, in process, for the
// commands that talk to a running vigil (override, diagnose --config).
type runningDaemon struct {
	d         *daemon.Daemon
	cfgPath   string
	statusURL string
	proxyURL  string
	logs      *testinfra.Buffer
}

// startDaemon runs the daemon on yml until the test ends. Its listeners
// are bound when daemon.New returns.
func startDaemon(t *testing.T, yml string) *runningDaemon {
	t.Helper()
	path := filepath.Join(t.TempDir(), "vigil.yaml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := daemon.LoadConfig(path, false)
	if err != nil {
		t.Fatal(err)
	}
	logs := &testinfra.Buffer{}
	l := logrus.New()
	l.SetOutput(logs)
	ctx, cancel := context.WithCancel(context.Background())
	d, err := daemon.New(ctx, cfg, logrus.NewEntry(l), daemon.Options{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("daemon did not stop within 15s")
		}
	})
	return &runningDaemon{d: d, cfgPath: path, statusURL: "http://" + d.StatusAddr(), proxyURL: "http://" + d.AdmissionAddr(), logs: logs}
}

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
