package restarter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

// Restarter restarts the engine and tells when it last started, so that
// recovery can skip a restart the engine already did by itself. Every call
// honours the caller's context.
type Restarter interface {
	// Restart stops and starts the engine, returning when the engine
	// process has been started again (not when it is ready).
	Restart(ctx context.Context) error
	// Status reads the engine's start time and restart count.
	Status(ctx context.Context) (EngineStatus, error)
	// String names the restarter and its target, e.g. "docker container vllm".
	String() string
}

// EngineStatus is what the restarter knows about the engine's process.
type EngineStatus struct {
	// Known is false when the restarter cannot tell start times (a plain
	// command); recovery then cannot detect a restart by itself.
	Known bool `json:"known"`
	// StartedAt is when the engine process last started.
	StartedAt time.Time `json:"started_at,omitzero"`
	// StartID changes on every start (Docker's StartedAt text, systemd's
	// monotonic start stamp); compare it rather than StartedAt.
	StartID string `json:"start_id,omitempty"`
	// RestartCount counts restarts the engine's supervisor did by itself
	// (Docker restart policy, systemd Restart=).
	RestartCount int  `json:"restart_count"`
	Running      bool `json:"running"`
}

// StartedSince reports whether the engine started again between before
// and s. It is false when either status is unknown.
func (s EngineStatus) StartedSince(before EngineStatus) bool {
	if !s.Known || !before.Known {
		return false
	}
	return s.StartID != before.StartID || s.RestartCount != before.RestartCount
}

// CommandRunner runs argv and returns its combined output. Tests inject a
// fake; ExecRunner runs real processes.
type CommandRunner func(ctx context.Context, argv []string) ([]byte, error)

// ExecRunner runs argv[0] with the rest as arguments, no shell.
func ExecRunner(ctx context.Context, argv []string) ([]byte, error) {
	if len(argv) == 0 {
		return nil, errors.New("empty command")
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.Bytes(), err
}

// New builds the restarter restart.kind asks for. run may be nil
// (ExecRunner).
func New(cfg configs.Restart, run CommandRunner) (Restarter, error) {
	if run == nil {
		run = ExecRunner
	}
	switch cfg.Kind {
	case "docker":
		return NewDocker(cfg.Docker)
	case "systemd":
		return NewSystemd(cfg.Systemd.Unit, run), nil
	case "command":
		return NewCommand(cfg.Command, run), nil
	case "none", "":
		return NoRestart{}, nil
	default:
		return nil, fmt.Errorf("restarter: unknown restart.kind %q (want docker, systemd, command or none)", cfg.Kind)
	}
}

// NoRestart is the restarter when restart.kind is none: vigil may drain
// a broken host but cannot restart it; Restart fails saying so, so the
// host stays drained and a human is paged.
type NoRestart struct{}

// Restart always fails: nothing is configured to restart the engine.
func (NoRestart) Restart(context.Context) error {
	return errors.New("cannot restart: restart.kind is none (restart the engine by hand; vigil restores traffic once it is ready)")
}

// Status is unknown.
func (NoRestart) Status(context.Context) (EngineStatus, error) { return EngineStatus{}, nil }

func (NoRestart) String() string { return "none (restart.kind is none)" }

// Systemd restarts a systemd unit with systemctl.
type Systemd struct {
	unit string
	run  CommandRunner
}

// NewSystemd returns a restarter for unit; run may be nil (ExecRunner).
func NewSystemd(unit string, run CommandRunner) *Systemd {
	if run == nil {
		run = ExecRunner
	}
	return &Systemd{unit: unit, run: run}
}

func (s *Systemd) String() string { return "systemd unit " + s.unit }

// Restart runs "systemctl restart UNIT", which returns once the unit has
// started again.
func (s *Systemd) Restart(ctx context.Context) error {
	out, err := s.run(ctx, []string{"systemctl", "restart", s.unit})
	if err != nil {
		return fmt.Errorf("systemd: systemctl restart %s: %w: %s", s.unit, ctxErr(ctx, err), firstLine(string(out)))
	}
	return nil
}

// Status reads the unit's start stamps and restart count with "systemctl
// show". The monotonic stamp identifies a start; the wall-clock one dates
// it.
func (s *Systemd) Status(ctx context.Context) (EngineStatus, error) {
	argv := []string{"systemctl", "show", "-p", "ActiveEnterTimestampMonotonic", "-p", "ExecMainStartTimestamp",
		"-p", "ExecMainStartTimestampMonotonic", "-p", "NRestarts", "-p", "ActiveState", s.unit}
	out, err := s.run(ctx, argv)
	if err != nil {
		return EngineStatus{}, fmt.Errorf("systemd: systemctl show %s: %w: %s", s.unit, ctxErr(ctx, err), firstLine(string(out)))
	}
	props := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			props[k] = v
		}
	}
	st := EngineStatus{Known: true, Running: props["ActiveState"] == "active"}
	st.StartID = props["ExecMainStartTimestampMonotonic"]
	if st.StartID == "" || st.StartID == "0" {
		st.StartID = props["ActiveEnterTimestampMonotonic"]
	}
	if st.StartID == "" {
		return EngineStatus{}, fmt.Errorf("systemd: systemctl show %s: no start timestamp in %q", s.unit, firstLine(string(out)))
	}
	st.StartedAt = parseSystemdTime(props["ExecMainStartTimestamp"])
	if n, err := strconv.Atoi(props["NRestarts"]); err == nil {
		st.RestartCount = n
	}
	return st, nil
}

// parseSystemdTime reads systemd's "Tue 2024-01-02 03:04:05 UTC" (or
// "@1704164645" with --timestamp=unix). Zero if it cannot.
func parseSystemdTime(v string) time.Time {
	v = strings.TrimSpace(v)
	if v == "" || v == "n/a" {
		return time.Time{}
	}
	if sec, ok := strings.CutPrefix(v, "@"); ok {
		if n, err := strconv.ParseInt(sec, 10, 64); err == nil {
			return time.Unix(n, 0)
		}
	}
	for _, layout := range []string{"Mon 2006-01-02 15:04:05 MST", "Mon 2006-01-02 15:04:05.000000 MST"} {
		if t, err := time.ParseInLocation(layout, v, time.Local); err == nil {
			return t
		}
	}
	return time.Time{}
}

// Command restarts the engine with an operator's command (argv, no shell).
// It cannot tell start times.
type Command struct {
	argv    []string
	timeout time.Duration
	run     CommandRunner
}

// NewCommand returns a restarter running cfg.Argv within cfg.Timeout; run
// may be nil (ExecRunner).
func NewCommand(cfg configs.CommandRestart, run CommandRunner) *Command {
	if run == nil {
		run = ExecRunner
	}
	return &Command{argv: cfg.Argv, timeout: cfg.Timeout, run: run}
}

func (c *Command) String() string {
	if len(c.argv) == 0 {
		return "command (none configured)"
	}
	return "command " + c.argv[0]
}

// Restart runs the command; a non-zero exit or the timeout is an error.
func (c *Command) Restart(ctx context.Context) error {
	if len(c.argv) == 0 {
		return errors.New("command: no argv configured")
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	out, err := c.run(ctx, c.argv)
	if err != nil {
		// Only argv[0] is named: arguments may carry secrets.
		return fmt.Errorf("command: %s: %w: %s", c.argv[0], ctxErr(ctx, err), firstLine(string(out)))
	}
	return nil
}

// Status is unknown for a command.
func (c *Command) Status(context.Context) (EngineStatus, error) { return EngineStatus{}, nil }
