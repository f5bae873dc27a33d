package recoverer

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/restarter"
	"github.com/vigil-dev/vigil/state"
)

// TestDockerRealResumeNeverRestartsTwice runs the recovery against a real
// container: vigil dies right after Docker restarted the engine; the next
// vigil sees the new StartedAt and does not restart again.
func TestDockerRealResumeNeverRestartsTwice(t *testing.T) {
	d := testinfra.StartDockerd(t)
	d.RunStartCounter(t, "engine-resume")
	dr, err := restarter.NewDocker(configs.DockerRestart{Host: d.Host, Container: "engine-resume", StopTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer dr.Close()
	lb, rs := testConfigs()
	lb.Kind, lb.RampDuration, lb.DrainTimeoutHung = "none", 0, time.Second
	rs.Docker = configs.DockerRestart{Host: d.Host, Container: "engine-resume", StopTimeout: 2 * time.Second}
	store, err := state.Open(filepath.Join(t.TempDir(), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	killer := &killingRestarter{Restarter: dr, kill: cancel}
	rep := &steps{}
	opts := Options{
		LoadBalancer: lb, Restart: rs, Drainer: balancer.NoDrain{}, Restarter: killer, Store: store, Reporter: rep,
		Ready: func(context.Context) error { return nil }, ReadyPoll: 50 * time.Millisecond, DrainPoll: 50 * time.Millisecond,
		RestartSettle: 5 * time.Second, Log: testLog(t),
	}
	rec, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	inc, v := hungIncident()
	rec.Recover(ctx, inc, v)
	rec.Wait()
	if n := d.Starts(t, "engine-resume"); n != 2 {
		t.Fatalf("after the first vigil: %d starts, want 2", n)
	}
	// The next vigil, on the same state file.
	store2, err := state.Open(store.Path())
	if err != nil {
		t.Fatal(err)
	}
	opts.Store, opts.Restarter = store2, dr
	rec2, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := rec2.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec2.Wait()
	if n := d.Starts(t, "engine-resume"); n != 2 {
		t.Fatalf("after resume: %d starts, want still 2 (no second restart)", n)
	}
	if last := rep.last(); last.Name != recovery.StepResolved {
		t.Fatalf("steps %v", rep.names())
	}
}

// killingRestarter lets the restart reach Docker, then "kills vigil"
// before the answer is journaled.
type killingRestarter struct {
	restarter.Restarter
	kill func()
}

func (k *killingRestarter) Restart(ctx context.Context) error {
	err := k.Restarter.Restart(ctx)
	k.kill()
	if err != nil {
		return err
	}
	return context.Canceled
}
