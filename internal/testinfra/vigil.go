package testinfra

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Vigil is the vigil binary run by a test as `vigil run --config F`: the
// code under test, not a real part, so a vigil that does not start fails
// the test. It can be killed and started again on the same config, as a
// crash and a restart would be; every run's output goes to Logs, after a
// line that numbers the run.
type Vigil struct {
	// Config is the config file's path; StatusURL the base URL of its
	// status listener, "http://127.0.0.1:port".
	Config, StatusURL string
	Logs              *Buffer

	bin    string
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	runs   int
}

// vigilStatus reads /status while vigil starts: a second is long for a
// status page on loopback.
var vigilStatus = &http.Client{Timeout: time.Second}

// StartVigil writes yaml to a config file, runs vigil on it and waits
// until statusURL/status answers. vigil is stopped when the test ends,
// and its config and output are printed if the test failed.
func StartVigil(t testing.TB, yaml, statusURL string) *Vigil {
	t.Helper()
	v := &Vigil{Config: filepath.Join(t.TempDir(), "vigil.yaml"), StatusURL: statusURL, Logs: &Buffer{},
		bin: BuildStatic(t, "./cmd/vigil")}
	if err := os.WriteFile(v.Config, []byte(yaml), 0o600); err != nil {
		t.Fatalf("testinfra: %v", err)
	}
	t.Cleanup(func() {
		v.Stop()
		if t.Failed() {
			t.Logf("vigil's output (config %s):\n%s\n%s", v.Config, yaml, v.Logs.String())
		}
	})
	v.Start(t)
	return v
}

// Start runs a new vigil process and waits until its /status answers.
func (v *Vigil) Start(t testing.TB) {
	t.Helper()
	v.mu.Lock()
	v.runs++
	fmt.Fprintf(v.Logs, "===== vigil run %d at %s\n", v.runs, time.Now().Format("15:04:05.000"))
	cmd := exec.Command(v.bin, "run", "--config", v.Config, "--log-level", "info")
	cmd.Stdout, cmd.Stderr = v.Logs, v.Logs
	// If the test binary dies, vigil dies with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		v.mu.Unlock()
		t.Fatalf("start vigil: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	v.cmd, v.exited = cmd, exited
	v.mu.Unlock()

	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := vigilStatus.Get(v.StatusURL + "/status")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-exited:
			t.Fatalf("vigil exited at start (%v):\n%s", cmd.ProcessState, v.Logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("vigil's /status at %s not answering after 15s", v.StatusURL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill sends SIGKILL, as a crash or the OOM killer would, and waits for
// the process to be gone.
func (v *Vigil) Kill(t testing.TB) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill -9 vigil: %v", err)
	}
	<-v.exited
	fmt.Fprintf(v.Logs, "===== vigil run %d killed with SIGKILL at %s\n", v.runs, time.Now().Format("15:04:05.000"))
}

// Stop sends SIGTERM and waits; SIGKILL if vigil does not stop within
// 15 s. A vigil already gone is left as it is.
func (v *Vigil) Stop() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cmd == nil {
		return
	}
	select {
	case <-v.exited:
		return
	default:
	}
	terminate(v.cmd, v.exited, 15*time.Second)
}

// GetJSON decodes the JSON of a 200 answer to GET url into v (a status
// page, an API's answer); any other status is an error naming it.
func GetJSON(c *http.Client, url string, v any) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
