package cli

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestVigilDemoRunsTheDemoBinary(t *testing.T) {
	installed := t.TempDir()
	for _, name := range []string{"vigil", "vigil-demo"} {
		if err := os.WriteFile(filepath.Join(installed, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	alone := t.TempDir()
	onPath := func(names ...string) func(string) (string, error) {
		return func(name string) (string, error) {
			if slices.Contains(names, name) {
				return "/usr/local/bin/" + name, nil
			}
			return "", errors.New("not found")
		}
	}
	sourceTree := func(string) bool { return true }
	noSource := func(string) bool { return false }
	for _, tc := range []struct {
		name     string
		self     string
		lookPath func(string) (string, error)
		isDir    func(string) bool
		want     []string // nil: an error
	}{
		{"installed: the demo beside vigil", filepath.Join(installed, "vigil"), onPath("go", "vigil-demo"), sourceTree,
			[]string{filepath.Join(installed, "vigil-demo")}},
		{"go run in a source tree: the demo from the same source", filepath.Join(alone, "vigil"), onPath("go", "vigil-demo"), sourceTree,
			[]string{"/usr/local/bin/go", "run", demoSource}},
		{"a source tree without go: the demo on PATH", filepath.Join(alone, "vigil"), onPath("vigil-demo"), sourceTree,
			[]string{"/usr/local/bin/vigil-demo"}},
		{"elsewhere: the demo on PATH", filepath.Join(alone, "vigil"), onPath("go", "vigil-demo"), noSource,
			[]string{"/usr/local/bin/vigil-demo"}},
		{"no demo anywhere: an error saying where to get it", filepath.Join(alone, "vigil"), onPath("go"), noSource, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := demoCommand(tc.self, tc.lookPath, tc.isDir)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("demoCommand = %q, want an error", got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("demoCommand = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
