package testinfra

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
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
