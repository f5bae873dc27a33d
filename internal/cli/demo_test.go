package cli

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestVigilDemoRunsTheDemoBinary(t *testing.T) {
	// installed: a package's /usr/bin, vigil and vigil-demo side by side.
	// checkout: a source tree's root where `go build ./cmd/...` left both
	// binaries, the vigil-demo from some earlier commit.
	installed, checkout, alone := t.TempDir(), t.TempDir(), t.TempDir()
	for _, dir := range []string{installed, checkout} {
		for _, name := range []string{"vigil", "vigil-demo"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	onPath := func(names ...string) func(string) (string, error) {
		return func(name string) (string, error) {
			if slices.Contains(names, name) {
				return "/usr/local/bin/" + name, nil
			}
			return "", errors.New("not found")
		}
	}
	// sourceTree: the working directory is a source tree's root, and so
	// is checkout; noSource: neither is.
	sourceTree := func(p string) bool {
		return p == demoSource || p == filepath.Join(checkout, demoSource)
	}
	noSource := func(string) bool { return false }
	goRun := []string{"/usr/local/bin/go", "run", demoSource}
	for _, tc := range []struct {
		name     string
		self     string
		lookPath func(string) (string, error)
		isDir    func(string) bool
		want     []string // nil: an error containing wantErr
		wantErr  string
	}{
		{"installed: the demo beside vigil", filepath.Join(installed, "vigil"), onPath("go", "vigil-demo"), sourceTree,
			[]string{filepath.Join(installed, "vigil-demo")}, ""},
		{"installed, run outside any source tree", filepath.Join(installed, "vigil"), onPath(), noSource,
			[]string{filepath.Join(installed, "vigil-demo")}, ""},
		{"go run in a source tree: the demo from the same source", filepath.Join(alone, "vigil"), onPath("go", "vigil-demo"), sourceTree,
			goRun, ""},
		{"built into the source root: not the stale vigil-demo beside it", filepath.Join(checkout, "vigil"), onPath("go", "vigil-demo"), sourceTree,
			goRun, ""},
		{"a source tree without go: an error naming go", filepath.Join(alone, "vigil"), onPath("vigil-demo"), sourceTree,
			nil, "go is not on PATH"},
		{"elsewhere: never a vigil-demo found on PATH", filepath.Join(alone, "vigil"), onPath("go", "vigil-demo"), noSource,
			nil, "install the package"},
		{"no demo anywhere: an error saying where to get it", filepath.Join(alone, "vigil"), onPath("go"), noSource,
			nil, "go run ./cmd/vigil demo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := demoCommand(tc.self, tc.lookPath, tc.isDir)
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("demoCommand = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("demoCommand = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
