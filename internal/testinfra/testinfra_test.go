package testinfra

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestImageTarHoldsTheFilesTheirDirectoriesAndLinks(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "engine")
	if err := os.WriteFile(src, []byte("#!binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(dir, "image.tar")
	if err := writeImageTar(tarPath, []ImageFile{{Src: src, Dst: "/usr/local/bin/engine"}}, map[string]string{"/bin/sh": "busybox"}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]*tar.Header{}
	r := tar.NewReader(f)
	for {
		h, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h
	}
	for _, d := range []string{"usr/", "usr/local/", "usr/local/bin/", "bin/"} {
		if h := got[d]; h == nil || h.Typeflag != tar.TypeDir {
			t.Errorf("directory %s missing: %+v", d, h)
		}
	}
	if h := got["usr/local/bin/engine"]; h == nil || h.Mode != 0o755 || h.Size != 8 {
		t.Errorf("binary entry %+v", h)
	}
	if h := got["bin/sh"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox" {
		t.Errorf("link entry %+v", h)
	}
}

func TestFreeAddrIsLoopback(t *testing.T) {
	if a := FreeAddr(t); len(a) < len("127.0.0.1:1") || a[:10] != "127.0.0.1:" {
		t.Fatalf("FreeAddr = %q", a)
	}
}

func TestRequiredInCIOrWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		ci, env string
		want    bool
	}{
		{"", "", false},
		{"", "1", true},
		{"true", "", true},
		{"false", "", false},
		{"", "0", false},
	} {
		t.Setenv(CIEnv, tc.ci)
		t.Setenv(RequireHAProxyEnv, tc.env)
		if got := Required(RequireHAProxyEnv); got != tc.want {
			t.Errorf("CI=%q %s=%q: Required = %v, want %v", tc.ci, RequireHAProxyEnv, tc.env, got, tc.want)
		}
	}
}

// The llama.cpp build is where test.sh says, else in the cache folder of
// the version build.sh pins.
func TestLlamaCppDir(t *testing.T) {
	pinned, err := os.ReadFile("../../e2e/llamacpp/node-llama-cpp.version")
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(pinned))
	for _, tc := range []struct {
		name, dirEnv, cacheEnv, want string
	}{
		{"exported by test.sh", "/opt/llama", "/c", "/opt/llama"},
		{"the pinned version's cache folder", "", "/c", "/c/llama.cpp/node-llama-cpp-" + version},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(LlamaCppDirEnv, tc.dirEnv)
			t.Setenv("VIGIL_CACHE_DIR", tc.cacheEnv)
			got, err := llamaCppDir()
			if err != nil || got != tc.want {
				t.Fatalf("llamaCppDir() = %q, %v, want %q", got, err, tc.want)
			}
		})
	}
}
