package configs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestChangedNamesEachKeyAndKeepPutsItBack(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	os.WriteFile(keyFile, []byte("sk-old-secret\n"), 0o600)
	base := "engine:\n  url: http://127.0.0.1:8000\n  api_key:\n    file: " + keyFile + "\n"
	a, err := Parse([]byte(base), now)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		yml  string
		want []string
	}{
		{"an unchanged file changes nothing", base, nil},
		{"one scalar", base + "watchdog:\n  dry_run: true\n", []string{"watchdog.dry_run"}},
		{"two sections", base + "watchdog:\n  down_after: 3\nstatus:\n  listen: 127.0.0.1:9999\n", []string{"watchdog.down_after", "status.listen"}},
		{"a list is one key", strings.Replace(base, "  api_key:", "  metrics:\n    progress: [a]\n  api_key:", 1), []string{"engine.metrics.progress"}},
		{"an override", base + "overrides:\n  - key: watchdog.hang_after\n    value: 5m\n    until: 2026-12-01T09:00:00Z\n    reason: r\n", []string{"overrides"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Parse([]byte(tc.yml), now)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range Changed(a, b) {
				got = append(got, c.Key)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("Changed = %v, want %v", got, tc.want)
			}
			for _, k := range got {
				if !b.Keep(k, a) {
					t.Fatalf("Keep(%s) found no such key", k)
				}
			}
			if rest := Changed(a, b); len(rest) != 0 {
				t.Fatalf("after Keep of every change, still changed: %v", rest)
			}
		})
	}

	t.Run("a secret whose file changed is named, never shown", func(t *testing.T) {
		os.WriteFile(keyFile, []byte("sk-new-secret\n"), 0o600)
		b, err := Parse([]byte(base), now)
		if err != nil {
			t.Fatal(err)
		}
		ch := Changed(a, b)
		if len(ch) != 1 || ch[0].Key != "engine.api_key" {
			t.Fatalf("Changed = %+v", ch)
		}
		if s := fmt.Sprint(ch[0].Old, ch[0].New); strings.Contains(s, "sk-") {
			t.Fatalf("a secret printed: %s", s)
		}
	})
}

func TestMapShowsDurationsAsTextAndNoSecret(t *testing.T) {
	t.Setenv("VIGIL_TEST_KEY", "sk-map-secret")
	cfg, err := Parse([]byte("engine:\n  url: http://127.0.0.1:8000\n  api_key:\n    env: VIGIL_TEST_KEY\nwatchdog:\n  hang_after: 4m\n"), now)
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Map()
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "sk-map-secret") {
		t.Fatalf("the secret is in the map: %s", data)
	}
	if w, _ := m["watchdog"].(map[string]any); w["hang_after"] != "4m0s" || w["interval"] != "5s" {
		t.Fatalf("watchdog = %v", m["watchdog"])
	}
}
