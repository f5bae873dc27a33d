package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/internal/testinfra/simengine"
)

func vigil(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestCheckConfig(t *testing.T) {
	cases := []struct {
		name     string
		file     string
		code     int
		contains string
	}{
		{"the shipped minimal config passes", "../../configs/vigil.yaml", 0, "ok (engine http://127.0.0.1:8000"},
		{"the shipped example passes", "../../configs/example.yaml", 0, "ok ("},
		{"a config error exits 2 and names the key and line", "../../configs/testdata/invalid-hang-after.yaml", 2, "watchdog.hang_after (line 3): must be > interval (15s)"},
		{"a missing file exits 2", "/nonexistent/vigil.yaml", 2, "no such file"},
		{"an empty file exits 2", "../../configs/testdata/invalid-empty.yaml", 2, "(file): is empty: at least engine.url is required"},
		{"a config without engine.url exits 2", "../../configs/testdata/invalid-engine-url-missing.yaml", 2, "engine.url: is required"},
		{"a remote status listener exits 2 naming status.allow_remote", "../../configs/testdata/invalid-status-remote.yaml", 2,
			"status.listen (line 4): 0.0.0.0:9108 is not a loopback address"},
		{"a remote admission listener exits 2 naming admission.allow_remote", "../../configs/testdata/invalid-admission-remote.yaml", 2,
			"set admission.allow_remote: true"},
		{"an override of the wrong type exits 2", "../../configs/testdata/invalid-override-value.yaml", 2,
			`overrides[0].value (line 5): value "lots" for watchdog.hang_after`},
		{"a wrong-type until keeps its key and line", "../../configs/testdata/invalid-override-until.yaml", 2,
			`overrides[0].until (line 6): "tomorrow" is not an RFC 3339 time`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := vigil(t, "check-config", tc.file)
			if code != tc.code || !strings.Contains(out+errOut, tc.contains) {
				t.Fatalf("exit %d, out %q, err %q; want exit %d containing %q", code, out, errOut, tc.code, tc.contains)
			}
		})
	}
}

// TestCheckConfigAndRunRefuseTheSameFiles: whatever check-config refuses,
// run refuses with the same words before starting anything, and the
// reverse (both go through loadConfig).
func TestCheckConfigAndRunRefuseTheSameFiles(t *testing.T) {
	files, _ := filepath.Glob("../../configs/testdata/invalid-*.yaml")
	if len(files) == 0 {
		t.Fatal("no fixtures")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			ccCode, _, ccErr := vigil(t, "check-config", f)
			runCode, _, runErr := vigil(t, "run", "--config", f) // refused before anything starts
			if ccCode != exitUsage || runCode != exitUsage || ccErr != runErr || ccErr == "" {
				t.Fatalf("check-config: exit %d %q\nrun: exit %d %q", ccCode, ccErr, runCode, runErr)
			}
		})
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{{}, {"frobnicate"}, {"diagnose"}, {"diagnose", "--engine", "ftp://x"},
		{"diagnose", "--engine", "http://127.0.0.1:1", "--status", "ftp://127.0.0.1:9108"}, {"run", "--nope"}} {
		if code, _, _ := vigil(t, args...); code != exitUsage {
			t.Errorf("vigil %v exited %d, want %d", args, code, exitUsage)
		}
	}
}

// loadEngine keeps n closed-loop clients busy until the test ends.
func loadEngine(t *testing.T, url string, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	body := `{"prompt":"x","max_tokens":200,"vigil_sim":{"prompt_tokens":500,"output_tokens":200}}`
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := testinfra.NewJSONPost(ctx, url+"/v1/completions", body)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					testinfra.Drain(resp)
				} else {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
}

func TestDiagnoseJSONGivesTheRightStateForEachFault(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	os.WriteFile(keyFile, []byte("right-key\n"), 0o600)
	cases := []struct {
		name  string
		setup func(t *testing.T) (url string, extra []string)
		state string
		code  int
	}{
		{"an idle engine is healthy", func(t *testing.T) (string, []string) {
			return simengine.Start(t, nil).URL(), nil
		}, "healthy", 0},
		{"a deep queue with moving counters is saturated", func(t *testing.T) (string, []string) {
			s := simengine.Start(t, nil)
			loadEngine(t, s.URL(), 40)
			return s.URL(), nil
		}, "saturated", 1},
		{"a hang under load is hung", func(t *testing.T) (string, []string) {
			s := simengine.Start(t, nil)
			loadEngine(t, s.URL(), 8)
			time.Sleep(300 * time.Millisecond)
			s.Engine.Hang()
			return s.URL(), nil
		}, "hung", 2},
		{"a crashed engine is down", func(t *testing.T) (string, []string) {
			s := simengine.Start(t, nil)
			s.Engine.Crash()
			<-s.Done()
			return s.URL(), nil
		}, "down", 2},
		{"a wrong API key is misconfigured", func(t *testing.T) (string, []string) {
			s := simengine.Start(t, func(c *enginesim.Config) { c.APIKey = "other-key" })
			return s.URL(), []string{"--api-key-file", keyFile}
		}, "misconfigured", 3},
		{"the right API key is healthy", func(t *testing.T) (string, []string) {
			s := simengine.Start(t, func(c *enginesim.Config) { c.APIKey = "right-key" })
			return s.URL(), []string{"--api-key-file", keyFile}
		}, "healthy", 0},
		// The partial failures of issue #12.
		{"one data-parallel rank hung under load is hung", func(t *testing.T) (string, []string) {
			s := simengine.Start(t, func(c *enginesim.Config) { c.DataParallel = 2 })
			loadEngine(t, s.URL(), 8)
			time.Sleep(300 * time.Millisecond)
			if err := s.Engine.HangRank(1); err != nil {
				t.Fatal(err)
			}
			return s.URL(), nil
		}, "hung", 2},
		{"a decode stall while prefill goes on is hung", func(t *testing.T) (string, []string) {
			s := simengine.Start(t, func(c *enginesim.Config) { c.MaxNumSeqs = 64 })
			loadEngine(t, s.URL(), 8)
			time.Sleep(300 * time.Millisecond)
			s.Engine.StallDecode()
			loadEngine(t, s.URL(), 16)
			return s.URL(), nil
		}, "hung", 2},
		{"a wedged API server is hung", func(t *testing.T) (string, []string) {
			s := simengine.Start(t, nil)
			s.Engine.Wedge()
			return s.URL(), nil
		}, "hung", 2},
		{"/v1/models answering 503 on a serving engine is not down", func(t *testing.T) (string, []string) {
			s := simengine.Start(t, nil)
			if err := s.Engine.FailEndpoint("/v1/models", 503); err != nil {
				t.Fatal(err)
			}
			return s.URL(), nil
		}, "healthy", 0},
		{"a probe failing (wrong model) on a saturated engine is saturated and says so", func(t *testing.T) (string, []string) {
			s := simengine.Start(t, nil)
			loadEngine(t, s.URL(), 40)
			return s.URL(), []string{"--model", "no-such-model"}
		}, "saturated", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, extra := tc.setup(t)
			args := append([]string{"diagnose", "--engine", url, "--json", "--window", "1500ms", "--interval", "250ms", "--hang-after", "700ms"}, extra...)
			code, out, errOut := vigil(t, args...)
			var got struct {
				State    string          `json:"state"`
				Reason   string          `json:"reason"`
				Evidence json.RawMessage `json:"evidence"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("not one JSON object: %v\n%s\n%s", err, out, errOut)
			}
			if strings.Contains(tc.name, "probe failing") && !strings.Contains(got.Reason, "probe failing: 404") {
				t.Errorf("reason %q does not name the failing probe", got.Reason)
			}
			if got.State != tc.state || code != tc.code || got.Reason == "" || len(got.Evidence) < 10 {
				t.Fatalf("state %q exit %d (want %q, %d); reason %q", got.State, code, tc.state, tc.code, got.Reason)
			}
			if strings.Contains(out, "right-key") || strings.Contains(errOut, "right-key") {
				t.Fatal("the API key leaked into diagnose's output")
			}
		})
	}
}

func TestDiagnoseTextNamesTheVerdictAndTheLongestGap(t *testing.T) {
	s := simengine.Start(t, nil)
	code, out, _ := vigil(t, "diagnose", "--engine", s.URL(), "--window", "500ms", "--interval", "250ms")
	for _, want := range []string{"HEALTHY (exit 0)", "longest gap", "/v1/models", "completion probe", "Capacity"} {
		if !strings.Contains(out, want) {
			t.Errorf("diagnose output lacks %q:\n%s", want, out)
		}
	}
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
}
