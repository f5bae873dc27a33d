package restarter

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/testinfra"
)

func TestDockerRealRestartChangesStartedAtOnce(t *testing.T) {
	testinfra.Long(t, "restarts a real container with its stop timeout")
	d := testinfra.StartDockerd(t)
	d.RunStartCounter(t, "engine-restart")
	r, err := NewDocker(configs.DockerRestart{Host: d.Host, Container: "engine-restart", StopTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	before, err := r.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !before.Known || !before.Running || before.StartedAt.IsZero() || before.StartID != d.StartedAt(t, "engine-restart") {
		t.Fatalf("status before = %+v (docker says StartedAt %s)", before, d.StartedAt(t, "engine-restart"))
	}
	if err := r.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := r.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !after.StartedSince(before) || !after.StartedAt.After(before.StartedAt) || !after.Running {
		t.Fatalf("after restart: %+v, before: %+v", after, before)
	}
	if n := d.Starts(t, "engine-restart"); n != 2 {
		t.Fatalf("container started %d times, want 2 (the first start and one restart)", n)
	}
	if after.StartID != d.StartedAt(t, "engine-restart") {
		t.Fatalf("StartedAt moved again after the restart returned")
	}
}

func TestDockerMissingSocketSaysSo(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "docker.sock")
	r, err := NewDocker(configs.DockerRestart{Host: "unix://" + sock, Container: "vllm", StopTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for name, err := range map[string]error{"restart": r.Restart(ctx), "status": func() error { _, err := r.Status(ctx); return err }()} {
		if err == nil || !strings.Contains(err.Error(), sock+" does not exist") || !strings.Contains(err.Error(), "container vllm") {
			t.Errorf("%s with a missing socket: %v", name, err)
		}
	}
}

// fakeDocker is a DockerAPI for the cases a real daemon cannot show.
type fakeDocker struct {
	inspect container.InspectResponse
	err     error
	stopped *int
}

func (f *fakeDocker) ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error) {
	return f.inspect, f.err
}

func (f *fakeDocker) ContainerRestart(ctx context.Context, id string, o container.StopOptions) error {
	f.stopped = o.Timeout
	return f.err
}

func TestDockerWithAFakeAPI(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "docker.sock")
	if err := os.WriteFile(sock, nil, 0o600); err != nil { // exists, but vigil may not use it
		t.Fatal(err)
	}
	cfg := configs.DockerRestart{Host: "unix://" + sock, Container: "vllm", StopTimeout: 1500 * time.Millisecond}
	t.Run("the stop timeout is passed in whole seconds, rounded up", func(t *testing.T) {
		f := &fakeDocker{}
		if err := NewDockerWithAPI(f, cfg).Restart(context.Background()); err != nil || f.stopped == nil || *f.stopped != 2 {
			t.Fatalf("err %v, timeout %v", err, f.stopped)
		}
	})
	t.Run("permission denied on the socket says what to fix", func(t *testing.T) {
		f := &fakeDocker{err: errors.New("permission denied while trying to connect to the Docker daemon socket at unix://" + sock)}
		err := NewDockerWithAPI(f, cfg).Restart(context.Background())
		if err == nil || !strings.Contains(err.Error(), "permission denied on docker socket "+sock) || !strings.Contains(err.Error(), "docker group") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a container that never started has no start time", func(t *testing.T) {
		f := &fakeDocker{inspect: container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{
			State: &container.State{StartedAt: "0001-01-01T00:00:00Z"}, RestartCount: 4}}}
		st, err := NewDockerWithAPI(f, cfg).Status(context.Background())
		if err != nil || !st.StartedAt.IsZero() || st.RestartCount != 4 || st.Running || !st.Known {
			t.Fatalf("status %+v, %v", st, err)
		}
	})
}

func TestEngineStatusStartedSince(t *testing.T) {
	a := EngineStatus{Known: true, StartID: "2026-01-01T00:00:00Z"}
	cases := []struct {
		name string
		b    EngineStatus
		want bool
	}{
		{"the same start is not a restart", a, false},
		{"a new start time is a restart", EngineStatus{Known: true, StartID: "2026-01-01T00:05:00Z"}, true},
		{"a supervisor restart counted without a new time is a restart", EngineStatus{Known: true, StartID: a.StartID, RestartCount: 1}, true},
		{"an unknown status never proves a restart", EngineStatus{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.b.StartedSince(a); got != c.want {
				t.Fatalf("StartedSince = %v", got)
			}
		})
	}
}
