package configs

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestAutoDurationReadsAndWritesAutoOrADuration(t *testing.T) {
	for _, tc := range []struct {
		text string
		want AutoDuration
	}{
		{"auto", Automatic()},
		{"90s", Fixed(90 * time.Second)},
		{"700ms", Fixed(700 * time.Millisecond)},
		{"0s", Fixed(0)}, // a zero, not auto: each key says whether it may be 0
		{"0", Fixed(0)},  // the one bare number, as for any duration
	} {
		var y struct {
			V AutoDuration `yaml:"v"`
		}
		if err := yaml.Unmarshal([]byte("v: "+tc.text+"\n"), &y); err != nil || y.V != tc.want {
			t.Errorf("YAML %q = %v, %v; want %v", tc.text, y.V, err, tc.want)
		}
		out, err := yaml.Marshal(y)
		if want := "v: " + tc.want.String() + "\n"; err != nil || string(out) != want {
			t.Errorf("YAML of %v = %q, %v; want %q", tc.want, out, err, want)
		}
		b, err := json.Marshal(tc.want)
		if err != nil {
			t.Fatal(err)
		}
		var back AutoDuration
		if err := json.Unmarshal(b, &back); err != nil || back != tc.want {
			t.Errorf("JSON %s read back as %v, %v; want %v", b, back, err, tc.want)
		}
	}
	if b, _ := json.Marshal(Automatic()); string(b) != `"auto"` {
		t.Errorf("JSON of auto = %s, want \"auto\"", b)
	}
}

func TestAutoDurationRefusesBareNumbersAndWords(t *testing.T) {
	for _, text := range []string{"90", "1.5", "5 minutes", "automatic", "[1s]"} {
		var y struct {
			V AutoDuration `yaml:"v"`
		}
		if err := yaml.Unmarshal([]byte("v: "+text+"\n"), &y); err == nil {
			t.Errorf("YAML %q read as %v, want an error", text, y.V)
		}
	}
	var a AutoDuration
	if err := json.Unmarshal([]byte(`90`), &a); err == nil {
		t.Errorf("JSON 90 read as %v, want an error", a)
	}
}

// A config shows an auto value as auto, as the file writes it, in
// check-config's YAML and in /status's map alike.
func TestAConfigShowsAutoAsAuto(t *testing.T) {
	cfg, err := Parse([]byte("engine:\n  url: http://127.0.0.1:8000\nadmission:\n  ttft_target: 700ms\n"), now)
	if err != nil {
		t.Fatal(err)
	}
	if y := cfg.Redacted(); !strings.Contains(y, "hang_after: auto\n") || !strings.Contains(y, "ttft_target: 700ms\n") {
		t.Errorf("Redacted:\n%s\nwant hang_after: auto and ttft_target: 700ms", y)
	}
	m := cfg.Map()
	if w, _ := m["watchdog"].(map[string]any); w["hang_after"] != "auto" {
		t.Errorf("Map watchdog.hang_after = %v, want auto", w["hang_after"])
	}
}

func TestABareNumberForAnAutoKeyNamesTheKeyAndLine(t *testing.T) {
	_, err := Parse([]byte("engine:\n  url: http://127.0.0.1:8000\nadmission:\n  ttft_target: 2\n"), now)
	want := "admission.ttft_target (line 4): 2 is a bare number; write a duration with a unit, e.g. 2s, or auto"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

// Changed sees an auto value change as one key, shown as the file writes
// it.
func TestChangedNamesAnAutoKeyOnce(t *testing.T) {
	a, b := Default(), Default()
	b.Watchdog.HangAfter = Fixed(4 * time.Minute)
	ch := Changed(&a, &b)
	if len(ch) != 1 || ch[0].Key != "watchdog.hang_after" || ch[0].Old.(AutoDuration).String() != "auto" ||
		ch[0].New.(AutoDuration).String() != "4m0s" {
		t.Fatalf("Changed = %+v, want watchdog.hang_after auto -> 4m0s", ch)
	}
	if !a.Keep("watchdog.hang_after", &b) || a.Watchdog.HangAfter != b.Watchdog.HangAfter {
		t.Fatalf("Keep did not set hang_after: %v", a.Watchdog.HangAfter)
	}
}
