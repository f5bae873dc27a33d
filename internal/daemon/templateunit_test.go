package daemon

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// unitLines are a unit file's settings, comments and blank lines left out.
func unitLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// vigil@.service is vigil.service per instance: the same hardening, the
// watchdog and restart policy, with only what names the instance changed.
func TestTheTemplateUnitIsTheUnitPerInstance(t *testing.T) {
	single := unitLines(t, "../../systemd/vigil.service")
	tmpl := unitLines(t, "../../systemd/vigil@.service")
	perInstance := map[string]string{
		"Description=vigil: LLM engine watchdog and admission limiter":      "Description=vigil %i: LLM engine watchdog and admission limiter",
		"ExecStart=/usr/bin/vigil run --config ${VIGIL_CONFIG} $VIGIL_ARGS": "ExecStart=/usr/bin/vigil run --config /etc/vigil/%i.yaml $VIGIL_ARGS",
		"StateDirectory=vigil": "StateDirectory=vigil/%i",
	}
	var want []string
	for _, l := range single {
		if r, ok := perInstance[l]; ok {
			l = r
		}
		want = append(want, l)
		if l == "EnvironmentFile=-/etc/default/vigil" {
			want = append(want, "EnvironmentFile=-/etc/default/vigil-%i")
		}
	}
	if !slices.Equal(tmpl, want) {
		for i := range max(len(tmpl), len(want)) {
			var got, w string
			if i < len(tmpl) {
				got = tmpl[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if got != w {
				t.Fatalf("vigil@.service line %d is %q, want %q (vigil.service with only the instance's names changed)", i+1, got, w)
			}
		}
	}
}
