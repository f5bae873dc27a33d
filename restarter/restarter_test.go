package restarter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

// fakeRunner answers commands from a table and records what ran.
type fakeRunner struct {
	ran    [][]string
	answer func(argv []string) ([]byte, error)
}

func (f *fakeRunner) run(ctx context.Context, argv []string) ([]byte, error) {
	f.ran = append(f.ran, argv)
	return f.answer(argv)
}

func TestSystemdRestarter(t *testing.T) {
	show := "ActiveEnterTimestampMonotonic=912345678\nExecMainStartTimestamp=Tue 2026-03-03 10:11:12 UTC\n" +
		"ExecMainStartTimestampMonotonic=912340000\nNRestarts=2\nActiveState=active\n"
	f := &fakeRunner{answer: func(argv []string) ([]byte, error) {
		if argv[1] == "show" {
			return []byte(show), nil
		}
		return nil, nil
	}}
	s := NewSystemd("vllm.service", f.run)
	st, err := s.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 3, 3, 10, 11, 12, 0, time.UTC)
	if !st.Known || st.StartID != "912340000" || !st.StartedAt.Equal(want) || st.RestartCount != 2 || !st.Running {
		t.Fatalf("status = %+v", st)
	}
	if err := s.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.ran[len(f.ran)-1], " "); got != "systemctl restart vllm.service" {
		t.Fatalf("ran %q", got)
	}

	f.answer = func([]string) ([]byte, error) {
		return []byte("Failed to restart vllm.service: Unit vllm.service not found.\n"), errors.New("exit status 5")
	}
	if err := s.Restart(context.Background()); err == nil || !strings.Contains(err.Error(), "Unit vllm.service not found") {
		t.Fatalf("restart of a missing unit: %v", err)
	}
	f.answer = func([]string) ([]byte, error) { return []byte("NRestarts=0\n"), nil }
	if _, err := s.Status(context.Background()); err == nil || !strings.Contains(err.Error(), "no start timestamp") {
		t.Fatalf("status without stamps: %v", err)
	}
}

func TestSystemdTimestamps(t *testing.T) {
	cases := []struct {
		name, in string
		want     time.Time
	}{
		{"systemd's usual form parses", "Tue 2026-03-03 10:11:12 UTC", time.Date(2026, 3, 3, 10, 11, 12, 0, time.UTC)},
		{"the unix form parses", "@1772532672", time.Unix(1772532672, 0)},
		{"a unit that never started has no time", "n/a", time.Time{}},
		{"nonsense has no time", "yesterday-ish", time.Time{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := parseSystemdTime(c.in); !got.Equal(c.want) {
				t.Fatalf("parseSystemdTime(%q) = %s, want %s", c.in, got, c.want)
			}
		})
	}
}

func TestCommandRestarter(t *testing.T) {
	var deadline time.Time
	f := &fakeRunner{answer: func([]string) ([]byte, error) { return nil, nil }}
	run := func(ctx context.Context, argv []string) ([]byte, error) {
		deadline, _ = ctx.Deadline()
		return f.run(ctx, argv)
	}
	c := NewCommand(configs.CommandRestart{Argv: []string{"/usr/local/bin/restart-engine", "--token=s3cret"}, Timeout: time.Minute}, run)
	if err := c.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if time.Until(deadline) > time.Minute || time.Until(deadline) < 50*time.Second {
		t.Fatalf("command ran without its timeout (deadline %s)", deadline)
	}
	f.answer = func([]string) ([]byte, error) { return []byte("engine busy\n"), errors.New("exit status 1") }
	err := c.Restart(context.Background())
	if err == nil || !strings.Contains(err.Error(), "restart-engine") || !strings.Contains(err.Error(), "engine busy") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("failed command error = %v (must name the command, not its arguments)", err)
	}
	if st, err := c.Status(context.Background()); err != nil || st.Known {
		t.Fatalf("a command cannot tell start times: %+v, %v", st, err)
	}
}

func TestExecRunnerRunsARealCommand(t *testing.T) {
	out, err := ExecRunner(context.Background(), []string{"sh", "-c", "echo hello; exit 3"})
	if err == nil || strings.TrimSpace(string(out)) != "hello" {
		t.Fatalf("out %q err %v", out, err)
	}
}

func TestNewByKind(t *testing.T) {
	rs := configs.Restart{Docker: configs.DockerRestart{Host: "unix:///var/run/docker.sock", Container: "vllm", StopTimeout: 30 * time.Second}}
	rs.Systemd.Unit, rs.Command.Argv = "vllm.service", []string{"/bin/true"}
	for kind, want := range map[string]string{"docker": "docker container vllm", "systemd": "systemd unit vllm.service", "command": "command /bin/true", "none": "none ("} {
		rs.Kind = kind
		r, err := New(rs, nil)
		if err != nil || !strings.HasPrefix(r.String(), want) {
			t.Errorf("restarter %s: %v, %v", kind, r, err)
		}
	}
	rs.Kind = "k8s"
	if _, err := New(rs, nil); err == nil {
		t.Error("unknown restarter kind accepted")
	}
	if err := (NoRestart{}).Restart(context.Background()); err == nil || !strings.Contains(err.Error(), "restart.kind is none") {
		t.Errorf("NoRestart.Restart = %v", err)
	}
}
