package testinfra

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RequireLlamaCppEnv makes a missing llama-server build a failure (CI sets
// it through CI=true: ./test.sh builds it before the tests).
const RequireLlamaCppEnv = "VIGIL_REQUIRE_LLAMACPP"

// LlamaCppDirEnv names the folder e2e/llamacpp/build.sh filled (test.sh
// exports it); unset, the build's default folder for the pinned version.
const LlamaCppDirEnv = "VIGIL_LLAMACPP_DIR"

// LlamaCpp is a llama.cpp build: the llama-server binary and the tiny
// random-weight model the tests serve.
type LlamaCpp struct {
	Server, Model string
}

// FindLlamaCpp returns the llama-server build and model, or gives up under
// the require rule naming the command that makes them.
func FindLlamaCpp(t testing.TB) LlamaCpp {
	t.Helper()
	dir, err := llamaCppDir()
	if err != nil {
		Unavailable(t, "LLAMA.CPP", RequireLlamaCppEnv, err)
	}
	l := LlamaCpp{Server: filepath.Join(dir, "bin", "llama-server"), Model: filepath.Join(dir, "tiny-llama.gguf")}
	for _, f := range []string{l.Server, l.Model} {
		if _, err := os.Stat(f); err != nil {
			Unavailable(t, "LLAMA.CPP", RequireLlamaCppEnv, fmt.Errorf("%w (e2e/llamacpp/build.sh builds it, once per machine)", err))
		}
	}
	return l
}

// llamaCppDir is $VIGIL_LLAMACPP_DIR, or where build.sh puts the pinned
// version: ${VIGIL_CACHE_DIR:-$HOME/.cache/vigil}/llama.cpp/node-llama-cpp-<version>.
func llamaCppDir() (string, error) {
	if d := os.Getenv(LlamaCppDirEnv); d != "" {
		return d, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	v, err := os.ReadFile(filepath.Join(root, "e2e", "llamacpp", "node-llama-cpp.version"))
	if err != nil {
		return "", err
	}
	cache := os.Getenv("VIGIL_CACHE_DIR")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		cache = filepath.Join(home, ".cache", "vigil")
	}
	return filepath.Join(cache, "llama.cpp", "node-llama-cpp-"+strings.TrimSpace(string(v))), nil
}

// LlamaServer is one llama-server process on loopback.
type LlamaServer struct {
	Addr string // host:port
	Log  string // its stdout and stderr
	cmd  *exec.Cmd
	done chan error
}

// StartLlamaServer runs llama-server on addr (a free loopback port when
// "") with the tiny model, --metrics and --slots on, and args (e.g.
// "--parallel", "2") added; it is killed when the test ends. It does not
// wait for the model: WaitReady does.
func (l LlamaCpp) StartLlamaServer(t testing.TB, addr string, args ...string) *LlamaServer {
	t.Helper()
	if addr == "" {
		addr = FreeAddr(t)
	}
	s := &LlamaServer{Addr: addr, Log: filepath.Join(t.TempDir(), "llama-server.log"), done: make(chan error, 1)}
	host, port, _ := strings.Cut(s.Addr, ":")
	argv := append([]string{"--model", l.Model, "--host", host, "--port", port, "--metrics", "--slots",
		"--threads", "1", "--ctx-size", "4096", "--no-webui", "--log-disable"}, args...)
	logf, err := os.Create(s.Log)
	if err != nil {
		t.Fatalf("testinfra: %v", err)
	}
	s.cmd = exec.Command(l.Server, argv...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		Unavailable(t, "LLAMA.CPP", RequireLlamaCppEnv, err)
	}
	go func() { s.done <- s.cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGCONT) // a stopped process does not die of SIGKILL until continued on some kernels
		_ = s.cmd.Process.Kill()
		<-s.done
		s.done <- nil
	})
	return s
}

// Pid is the server's process id.
func (s *LlamaServer) Pid() int { return s.cmd.Process.Pid }

// URL is the server's base URL.
func (s *LlamaServer) URL() string { return "http://" + s.Addr }

// Signal sends sig to the server (SIGSTOP, SIGCONT, SIGKILL).
func (s *LlamaServer) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("llama-server: signal %v: %v", sig, err)
	}
}

// Exited reports whether the process has ended.
func (s *LlamaServer) Exited() bool {
	select {
	case err := <-s.done:
		s.done <- err
		return true
	default:
		return false
	}
}

// WaitReady waits until /health answers 200 (the model is loaded); a
// server that exits or never gets there is unavailable, with its log.
func (s *LlamaServer) WaitReady(t testing.TB, within time.Duration) {
	t.Helper()
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(within)
	var err error
	for time.Now().Before(deadline) {
		var resp *http.Response
		if resp, err = c.Get(s.URL() + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("/health answered %d", resp.StatusCode)
		}
		if s.Exited() {
			err = errors.New("llama-server exited")
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	log, _ := os.ReadFile(s.Log)
	Unavailable(t, "LLAMA.CPP", RequireLlamaCppEnv, fmt.Errorf("not ready within %s (%v): %s", within, err, tail(log)))
}

// ImageFiles are the files of an image that runs this llama-server:
// /llama-server, the model as /tiny-llama.gguf, and the shared libraries
// ldd names (the build links libstdc++, libgomp and libc dynamically).
func (l LlamaCpp) ImageFiles(t testing.TB) []ImageFile {
	t.Helper()
	out, err := exec.Command("ldd", l.Server).Output()
	if err != nil {
		Unavailable(t, "LLAMA.CPP", RequireLlamaCppEnv, fmt.Errorf("ldd %s: %w", l.Server, err))
	}
	files := []ImageFile{{Src: l.Server, Dst: "/llama-server"}, {Src: l.Model, Dst: "/tiny-llama.gguf", Mode: 0o644}}
	for _, line := range strings.Split(string(out), "\n") {
		// "libgomp.so.1 => /lib/x86_64-linux-gnu/libgomp.so.1 (0x...)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no file.
		f := strings.Fields(line)
		path := ""
		switch {
		case len(f) >= 3 && f[1] == "=>":
			path = f[2]
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			path = f[0]
		}
		if strings.HasPrefix(path, "/") {
			files = append(files, ImageFile{Src: path, Dst: path})
		}
	}
	return files
}
