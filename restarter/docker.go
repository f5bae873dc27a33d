package restarter

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/vigil-dev/vigil/configs"
)

// DockerAPI is the part of the Docker client vigil uses. Keeping it this
// narrow keeps the SDK (whose signatures change between versions) at the
// edge, and lets tests fake it.
type DockerAPI interface {
	ContainerInspect(ctx context.Context, containerID string) (container.InspectResponse, error)
	ContainerRestart(ctx context.Context, containerID string, options container.StopOptions) error
}

// Docker restarts the engine's container through the Docker API.
type Docker struct {
	api         DockerAPI
	host        string
	container   string
	stopTimeout time.Duration
	close       func() error
}

// NewDocker connects lazily to cfg.Host (negotiating the API version with
// the daemon) and returns a restarter for cfg.Container. Call Close when
// done.
func NewDocker(cfg configs.DockerRestart) (*Docker, error) {
	cli, err := client.NewClientWithOpts(client.WithHost(cfg.Host), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker: client for %s: %w", cfg.Host, err)
	}
	d := NewDockerWithAPI(cli, cfg)
	d.close = cli.Close
	return d, nil
}

// NewDockerWithAPI returns a restarter over api (a real client or a fake).
func NewDockerWithAPI(api DockerAPI, cfg configs.DockerRestart) *Docker {
	return &Docker{api: api, host: cfg.Host, container: cfg.Container, stopTimeout: cfg.StopTimeout, close: func() error { return nil }}
}

// Close releases the client's connections.
func (d *Docker) Close() error { return d.close() }

func (d *Docker) String() string { return "docker container " + d.container }

// Restart restarts the container: SIGTERM, up to the stop timeout for it
// to exit, SIGKILL, start.
func (d *Docker) Restart(ctx context.Context) error {
	secs := int((d.stopTimeout + time.Second - 1) / time.Second)
	if err := d.api.ContainerRestart(ctx, d.container, container.StopOptions{Timeout: &secs}); err != nil {
		return fmt.Errorf("docker: restart container %s via %s: %w", d.container, d.host, d.explain(ctx, err))
	}
	return nil
}

// Status inspects the container for its start time and restart count.
func (d *Docker) Status(ctx context.Context) (EngineStatus, error) {
	info, err := d.api.ContainerInspect(ctx, d.container)
	if err != nil {
		return EngineStatus{}, fmt.Errorf("docker: inspect container %s via %s: %w", d.container, d.host, d.explain(ctx, err))
	}
	st := EngineStatus{Known: true, RestartCount: info.RestartCount}
	if info.ContainerJSONBase == nil || info.State == nil {
		return EngineStatus{}, fmt.Errorf("docker: inspect container %s via %s: no state in the answer", d.container, d.host)
	}
	st.StartID = info.State.StartedAt
	st.Running = info.State.Running && !info.State.Restarting
	if t, err := time.Parse(time.RFC3339Nano, info.State.StartedAt); err == nil && t.Year() > 1 {
		st.StartedAt = t
	}
	return st, nil
}

// explain turns the client's connection errors into ones that say what to
// fix: the socket is missing, or vigil may not use it.
func (d *Docker) explain(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	sock, isUnix := strings.CutPrefix(d.host, "unix://")
	permission := strings.Contains(err.Error(), "permission denied")
	if !isUnix || !(client.IsErrConnectionFailed(err) || permission) {
		return err
	}
	if _, serr := os.Stat(sock); errors.Is(serr, fs.ErrNotExist) {
		return fmt.Errorf("docker socket %s does not exist (is dockerd running? is restart.docker.host right?): %w", sock, err)
	}
	if permission || errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("permission denied on docker socket %s (run vigil as root or in the docker group): %w", sock, err)
	}
	return fmt.Errorf("docker socket %s does not answer: %w", sock, err)
}
