package testinfra

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Dockerd is the test binary's private Docker daemon: its own data and
// exec roots and socket in a temp directory, no bridge, no iptables.
// Containers use --network host.
type Dockerd struct {
	// Host is the API address for clients: "unix:///tmp/vdXXX/docker.sock".
	Host string
	// Socket is the socket's path.
	Socket string
	// Dir holds everything the daemon writes.
	Dir string

	cmd    *exec.Cmd
	exited chan struct{}
}

var (
	mainUsed bool

	dockerOnce sync.Once
	dockerd    *Dockerd
	dockerErr  error

	buildMu    sync.Mutex
	builds     = map[string]string{}
	buildDir   string
	buildDirMu sync.Once
)

// Run runs the tests and then stops what testinfra started once per test
// binary (dockerd and its containers). Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testinfra.Run(m)) }
func Run(m *testing.M) int {
	mainUsed = true
	code := m.Run()
	Shutdown()
	return code
}

// Shutdown removes every container, stops dockerd, unmounts what it left
// mounted and deletes its directory. Run calls it; it is safe to call
// twice.
func Shutdown() {
	if d := dockerd; d != nil && d.cmd != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if ids, err := d.cli(ctx, "ps", "-aq"); err == nil && strings.TrimSpace(ids) != "" {
			_, _ = d.cli(ctx, append([]string{"rm", "-f"}, strings.Fields(ids)...)...)
		}
		cancel()
		terminate(d.cmd, d.exited, 20*time.Second)
		unmountUnder(d.Dir)
		_ = os.RemoveAll(d.Dir)
		d.cmd = nil
	}
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
}

// StartDockerd returns the test binary's dockerd, starting it on first
// use. It skips the test with "DOCKER UNAVAILABLE: ..." when the daemon
// cannot start (fails instead under VIGIL_REQUIRE_DOCKER=1). The package's
// TestMain must use Run, which stops the daemon at the end.
func StartDockerd(t testing.TB) *Dockerd {
	t.Helper()
	if !mainUsed {
		t.Fatal("testinfra.StartDockerd: the package's TestMain must call testinfra.Run(m), so dockerd is stopped at the end")
	}
	dockerOnce.Do(func() { dockerd, dockerErr = startDockerd() })
	if dockerErr != nil {
		Unavailable(t, "DOCKER", RequireDockerEnv, dockerErr)
	}
	return dockerd
}

func startDockerd() (*Dockerd, error) {
	bin, err := exec.LookPath("dockerd")
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("docker"); err != nil {
		return nil, fmt.Errorf("docker CLI (used for test setup): %w", err)
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("dockerd needs root")
	}
	dir, err := shortTempDir("vd")
	if err != nil {
		return nil, err
	}
	d := &Dockerd{Dir: dir, Socket: filepath.Join(dir, "docker.sock"), exited: make(chan struct{})}
	d.Host = "unix://" + d.Socket
	logf, err := os.Create(filepath.Join(dir, "dockerd.log"))
	if err != nil {
		return nil, err
	}
	d.cmd = exec.Command(bin, "--bridge=none", "--iptables=false", "--ip6tables=false",
		"--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "exec"),
		"-H", d.Host, "--pidfile", filepath.Join(dir, "docker.pid"))
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	// If the test binary dies without Shutdown, dockerd dies with it.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		logf.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start dockerd: %w", err)
	}
	go func() { _ = d.cmd.Wait(); logf.Close(); close(d.exited) }()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", d.Socket)
	}}, Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get("http://docker/_ping")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d, nil
			}
		}
		select {
		case <-d.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "dockerd.log"))
			unmountUnder(dir)
			os.RemoveAll(dir)
			return nil, fmt.Errorf("dockerd exited at start: %s", tail(log))
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "dockerd.log"))
			dockerd = d // so Shutdown stops it
			return nil, fmt.Errorf("dockerd socket %s not answering after 30s (%v): %s", d.Socket, err, tail(log))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CLI runs the docker CLI against this daemon and returns its trimmed
// output, failing the test on error. It is for test setup and checks; code
// under test uses the Go client.
func (d *Dockerd) CLI(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := d.cli(ctx, args...)
	if err != nil {
		t.Fatalf("testinfra: docker %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func (d *Dockerd) cli(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", append([]string{"-H", d.Host}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// ImageFile is one file put into an imported image.
type ImageFile struct {
	// Src is a file on this host; Dst its absolute path in the image.
	Src, Dst string
	// Mode defaults to 0755.
	Mode int64
}

// ImportImage builds a tar holding only files (and the directories above
// them) and imports it as ref with "docker import". No registry involved.
func (d *Dockerd) ImportImage(t testing.TB, ref string, files ...ImageFile) {
	t.Helper()
	d.importImage(t, ref, files, nil)
}

// ImportBusybox imports the host's static busybox as ref, with /bin/sh and
// /bin/sleep linked to it.
func (d *Dockerd) ImportBusybox(t testing.TB, ref string) {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		Unavailable(t, "DOCKER", RequireDockerEnv, fmt.Errorf("no static busybox for a test image: %w", err))
	}
	d.importImage(t, ref, []ImageFile{{Src: bb, Dst: "/bin/busybox"}},
		map[string]string{"/bin/sh": "busybox", "/bin/sleep": "busybox"})
}

func (d *Dockerd) importImage(t testing.TB, ref string, files []ImageFile, links map[string]string) {
	t.Helper()
	dir, err := shortTempDir("vi")
	if err != nil {
		t.Fatalf("testinfra: %v", err)
	}
	defer os.RemoveAll(dir)
	tarPath := filepath.Join(dir, "image.tar")
	if err := writeImageTar(tarPath, files, links); err != nil {
		t.Fatalf("testinfra: image %s: %v", ref, err)
	}
	d.CLI(t, "import", tarPath, ref)
}

func writeImageTar(path string, files []ImageFile, links map[string]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriter(f)
	w := tar.NewWriter(bw)
	dirs := map[string]bool{}
	addDirs := func(p string) error {
		var parents []string
		for d := filepath.Dir(p); d != "/" && d != "."; d = filepath.Dir(d) {
			parents = append(parents, d)
		}
		sort.Strings(parents)
		for _, d := range parents {
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755}); err != nil {
				return err
			}
		}
		return nil
	}
	for _, fl := range files {
		data, err := os.ReadFile(fl.Src)
		if err != nil {
			return err
		}
		if err := addDirs(fl.Dst); err != nil {
			return err
		}
		mode := fl.Mode
		if mode == 0 {
			mode = 0o755
		}
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(fl.Dst, "/"), Mode: mode, Size: int64(len(data))}); err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
	for dst, target := range links {
		if err := addDirs(dst); err != nil {
			return err
		}
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(dst, "/"), Linkname: target, Mode: 0o777}); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	// tar.Writer.Close does not flush the buffer below it.
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// Container is a container to run with RunContainer.
type Container struct {
	Name  string
	Image string
	// Cmd is the command and its arguments (the imported images have no
	// default command).
	Cmd []string
	Env []string
	// RestartPolicy, e.g. "on-failure:3"; empty means none.
	RestartPolicy string
	// StopSignal, e.g. "SIGKILL" for a process that ignores SIGTERM.
	StopSignal string
}

// RunContainer runs c detached with --network host and removes it when
// the test ends. It returns the container's ID.
func (d *Dockerd) RunContainer(t testing.TB, c Container) string {
	t.Helper()
	args := []string{"run", "-d", "--network", "host"}
	if c.Name != "" {
		args = append(args, "--name", c.Name)
	}
	for _, e := range c.Env {
		args = append(args, "-e", e)
	}
	if c.RestartPolicy != "" {
		args = append(args, "--restart", c.RestartPolicy)
	}
	if c.StopSignal != "" {
		args = append(args, "--stop-signal", c.StopSignal)
	}
	args = append(append(args, c.Image), c.Cmd...)
	id := d.CLI(t, args...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = d.cli(ctx, "rm", "-f", id)
	})
	return id
}

// StartedAt is the container's State.StartedAt as Docker prints it.
func (d *Dockerd) StartedAt(t testing.TB, container string) string {
	t.Helper()
	return d.CLI(t, "inspect", "-f", "{{.State.StartedAt}}", container)
}

// BuildStatic builds the Go package pkg (e.g. "./cmd/vllm-sim", relative
// to the module root) as a static binary (CGO_ENABLED=0) once per test
// binary and returns its path. It fails the test if the build fails.
func BuildStatic(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := builds[pkg]; ok {
		return p
	}
	bin, err := buildStatic(pkg)
	if err != nil {
		t.Fatalf("testinfra: build %s: %v", pkg, err)
	}
	builds[pkg] = bin
	return bin
}

func buildStatic(pkg string) (string, error) {
	var err error
	buildDirMu.Do(func() { buildDir, err = shortTempDir("vb") })
	if err != nil {
		return "", err
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(buildDir, filepath.Base(pkg))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w: %s", err, tail(b))
	}
	return out, nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	return filepath.Dir(mod), nil
}

// unmountUnder detaches every mount below dir (dockerd leaves its netns
// mount behind), deepest first, so the directory can be removed.
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			points = append(points, f[1])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}
