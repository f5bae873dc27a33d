package daemon

// version is set at build time with
// -ldflags "-X github.com/vigil-dev/vigil/internal/daemon.version=...":
// here rather than in internal/cli so that vigil-demo, which runs the
// daemon without the command, reports the same version.
var version = "dev"

// Version is this build's version, as `vigil version` prints it and the
// start-up log and /status report it.
func Version() string { return version }
