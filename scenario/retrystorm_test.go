package scenario_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/watchdog"
)

// notices collects the watchdog's standalone notices.
type notices struct {
	mu   sync.Mutex
	list []string
}

func (n *notices) add(kind, text string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.list = append(n.list, kind+": "+text)
}

func (n *notices) of(kind string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, s := range n.list {
		if strings.HasPrefix(s, kind+": ") {
			out = append(out, s)
		}
	}
	return out
}

// impatient sends long prompts with a client timeout far shorter than
// their prefill and retries at once: every attempt is admitted, queried
// against the prefix cache, and aborted before its first token. That is a
// retry storm as the engine sees it.
func impatient(t *testing.T, url string, clients, prompt int, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	body, _ := json.Marshal(map[string]any{
		"model": "sim", "prompt": "x", "max_tokens": 50,
		"vigil_sim": map[string]any{"prompt_tokens": prompt, "output_tokens": 50},
	})
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				attempt, stop := context.WithTimeout(ctx, timeout)
				req, _ := http.NewRequestWithContext(attempt, http.MethodPost, url+"/v1/completions", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				stop()
			}
		}()
	}
}

func stormWatch(t *testing.T, url string, n *notices) *recorder {
	return watch(t, url, "", func(o *watchdog.Options) {
		o.Notice = n.add
		o.Watchdog.RetryStorm = configs.RetryStorm{Enabled: true, Window: time.Second, Ratio: 0.5, MinQueries: 20000}
	})
}

func TestRetryStormAlarmFiresWhenTheEnginePrefillsForClientsThatLeft(t *testing.T) {
	t.Parallel()
	cfg := engineConfig()
	cfg.AbortOnDisconnect = true
	_, url := serve(t, cfg, nil)
	// 40,000-token prompts take five 8,192-token steps (~15 ms of wall at
	// 20x) to prefill; clients give up after 8 ms and retry.
	impatient(t, url, 12, 40000, 8*time.Millisecond)
	n := &notices{}
	stormWatch(t, url, n)
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) && len(n.of("retry_storm")) == 0 {
		time.Sleep(100 * time.Millisecond)
	}
	got := n.of("retry_storm")
	if len(got) == 0 {
		t.Fatal("no retry-storm alarm while every attempt was abandoned before its first token")
	}
	if !strings.Contains(got[0], "prompt tokens +") || !strings.Contains(got[0], "prefix-cache queries +") {
		t.Fatalf("the alarm must carry both figures: %s", got[0])
	}
	t.Log(got[0])
}

func TestRetryStormAlarmStaysQuietUnderPlainSaturation(t *testing.T) {
	t.Parallel()
	_, url := serve(t, engineConfig(), nil)
	load(t, url, "", 40, 500, 200) // patient clients: a deep queue, no storm
	n := &notices{}
	rec := stormWatch(t, url, n)
	time.Sleep(4 * time.Second)
	if got := n.of("retry_storm"); len(got) > 0 {
		t.Fatalf("retry-storm alarm under plain saturation: %v", got)
	}
	if last := rec.last(); last.State != watchdog.StateSaturated {
		t.Fatalf("the engine should be saturated, got %s: %s", last.State, last.Reason)
	}
}
