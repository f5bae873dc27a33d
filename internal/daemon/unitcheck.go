package daemon

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/unit"

	"github.com/vigil-dev/vigil/configs"
)

// The installed unit (systemd/vigil.service) runs vigil as an unprivileged
// user in a sandbox. Some configs cannot work there, and would only show
// it at 3 a.m. when the first restart fails; UnitWarnings says so at
// check-config time instead. It reads the files systemd would: the unit,
// its drop-ins, the polkit rules and the group database under root ("/",
// or a test's directory). Without an installed vigil.service it says
// nothing: vigil then runs however its operator started it.

// unitDirs are where systemd looks for system units, first wins.
var unitDirs = []string{"etc/systemd/system", "run/systemd/system", "lib/systemd/system", "usr/lib/systemd/system"}

// polkitDirs hold polkit's JavaScript rules.
var polkitDirs = []string{"etc/polkit-1/rules.d", "usr/share/polkit-1/rules.d"}

// unitSettings are the [Service] settings the checks need, after drop-ins.
type unitSettings struct {
	file                    string
	user                    string
	environment             []string
	privateTmp, protectHome bool
	inaccessible            []string
	watchdogSec             time.Duration // 0: systemd's watchdog is off
	watchdogSecErr          error
}

func UnitWarnings(cfg *configs.Config, root string) []string {
	u, ok := readUnit(root, "vigil.service")
	if !ok {
		return nil
	}
	var warns []string
	warnf := func(format string, args ...any) { warns = append(warns, fmt.Sprintf(format, args...)) }
	// The heartbeat (systemd.go) matters whoever vigil runs as.
	if u.watchdogSecErr != nil {
		warnf("%s: WatchdogSec: %v; vigil cannot check its cycle against it", u.file, u.watchdogSecErr)
	} else if w := watchdogSecWarning(cfg, u.watchdogSec, "WatchdogSec in "+u.file); w != "" {
		warns = append(warns, w)
	}
	if u.user == "" || u.user == "root" {
		return warns // root in the unit: nothing below applies
	}

	switch cfg.Restart.Kind {
	case "systemd":
		engineUnit := cfg.Restart.Systemd.Unit
		if path.Ext(engineUnit) == "" {
			engineUnit += ".service"
		}
		if !polkitAllows(root, engineUnit) {
			warnf("restart.kind systemd: %s runs vigil as user %s, and no polkit rule in /etc/polkit-1/rules.d lets it "+
				"restart %s, so \"systemctl restart\" will be refused; install "+
				"/usr/share/doc/vigil/examples/50-vigil-restart-engine.rules with the unit name set to %s", u.file, u.user, engineUnit, engineUnit)
		}
		if !slices.Contains(u.environment, "SYSTEMD_OFFLINE=0") {
			warnf("restart.kind systemd: the drop-in /etc/systemd/system/vigil.service.d/restart-systemd.conf is missing " +
				"(from /usr/share/doc/vigil/examples); without it systemctl may take the sandbox for a chroot and ignore the restart")
		}
	case "docker":
		if p, ok := unixPath(cfg.Restart.Docker.Host); ok {
			warns = append(warns, u.socketWarnings(root, "restart.docker.host", p)...)
		}
	case "command":
		if len(cfg.Restart.Command.Argv) > 0 {
			switch filepath.Base(cfg.Restart.Command.Argv[0]) {
			case "sudo", "su", "pkexec", "doas":
				warnf("restart.command.argv: %s cannot gain privileges under %s (NoNewPrivileges=yes, no capabilities); "+
					"use restart.kind systemd with the polkit rule, or docker", cfg.Restart.Command.Argv[0], u.file)
			}
		}
	}
	if cfg.LoadBalancer.Kind == "haproxy" {
		key := func(int) string { return "load_balancer.haproxy.socket" }
		if len(cfg.LoadBalancer.HAProxy.Sockets) > 0 {
			key = func(i int) string { return fmt.Sprintf("load_balancer.haproxy.sockets[%d]", i) }
		}
		for i, s := range cfg.LoadBalancer.HAProxy.SocketList() {
			if p, ok := unixPath(s); ok {
				warns = append(warns, u.socketWarnings(root, key(i), p)...)
			}
		}
	}
	return warns
}

// socketWarnings: the socket must be visible inside the sandbox and
// connectable by the unit's user (owner, or a group the user is in).
func (u unitSettings) socketWarnings(root, key, sock string) []string {
	hidden := ""
	switch {
	case u.privateTmp && (under(sock, "/tmp") || under(sock, "/var/tmp")):
		hidden = "PrivateTmp=yes gives vigil its own /tmp and /var/tmp"
	case u.protectHome && (under(sock, "/home") || under(sock, "/root") || under(sock, "/run/user")):
		hidden = "ProtectHome=yes hides /home, /root and /run/user"
	}
	for _, p := range u.inaccessible {
		if hidden == "" && under(sock, p) {
			hidden = "InaccessiblePaths=" + p + " hides it"
		}
	}
	if hidden != "" {
		return []string{fmt.Sprintf("%s: %s is invisible to vigil under %s: %s; move the socket (e.g. under /run)", key, sock, u.file, hidden)}
	}
	fi, err := os.Stat(filepath.Join(root, sock))
	if err != nil {
		return nil // not there yet (HAProxy or Docker stopped); the probe says so at run time
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || fi.Mode().Perm()&0o006 == 0o006 {
		return nil
	}
	owner, okOwner := lookupID(root, "etc/passwd", st.Uid)
	group, okGroup := lookupID(root, "etc/group", st.Gid)
	if (okOwner && owner.name == u.user) || (okGroup && fi.Mode().Perm()&0o060 == 0o060 && group.hasMember(root, u.user)) {
		return nil
	}
	if !okGroup {
		return []string{fmt.Sprintf("%s: %s belongs to group id %d, which has no name here; vigil (user %s) cannot connect", key, sock, st.Gid, u.user)}
	}
	return []string{fmt.Sprintf("%s: %s is %v %s:%s and user %s is not in group %s, so vigil cannot connect; "+
		"run: usermod -aG %s %s && systemctl restart vigil", key, sock, fi.Mode().Perm(), owner.name, group.name, u.user, group.name, group.name, u.user)}
}

// readUnit reads name and its drop-ins (name.d/*.conf in every unit
// directory, applied in file name order, /etc winning a name clash).
func readUnit(root, name string) (unitSettings, bool) {
	var u unitSettings
	var files []string
	for _, d := range unitDirs {
		p := filepath.Join(root, d, name)
		if _, err := os.Stat(p); err == nil {
			u.file = "/" + filepath.Join(d, name)
			files = append(files, p)
			break
		}
	}
	if files == nil {
		return u, false
	}
	dropins := map[string]string{}
	for _, d := range slices.Backward(unitDirs) { // lowest priority first, so /etc overwrites
		matches, _ := filepath.Glob(filepath.Join(root, d, name+".d", "*.conf"))
		for _, m := range matches {
			dropins[filepath.Base(m)] = m
		}
	}
	names := make([]string, 0, len(dropins))
	for n := range dropins {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		files = append(files, dropins[n])
	}
	for _, f := range files {
		u.apply(f)
	}
	return u, true
}

// apply reads one unit file's [Service] section, parsed by go-systemd's
// unit package. An empty assignment resets a list, as in systemd. A file
// the parser rejects is skipped whole where systemd would skip only the
// bad line: the checks then say less, never something wrong.
func (u *unitSettings) apply(file string) {
	f, err := os.Open(file)
	if err != nil {
		return
	}
	defer f.Close()
	opts, err := unit.DeserializeOptions(f)
	if err != nil {
		return
	}
	for _, o := range opts {
		if o.Section != "Service" {
			continue
		}
		// A value continued over lines keeps its backslash-newlines;
		// systemd reads each as a space.
		val := strings.TrimSpace(strings.ReplaceAll(o.Value, "\\\n", " "))
		switch o.Name {
		case "User":
			u.user = val
		case "Environment":
			if val == "" {
				u.environment = nil
			}
			for _, e := range strings.Fields(val) {
				u.environment = append(u.environment, strings.Trim(e, `"`))
			}
		case "WatchdogSec":
			u.watchdogSec, u.watchdogSecErr = parseTimespan(val)
		case "PrivateTmp":
			u.privateTmp = isTrue(val)
		case "ProtectHome":
			u.protectHome = isTrue(val) || val == "read-only" || val == "tmpfs"
		case "InaccessiblePaths":
			if val == "" {
				u.inaccessible = nil
			}
			for _, p := range strings.Fields(val) {
				u.inaccessible = append(u.inaccessible, strings.TrimLeft(p, "-+"))
			}
		}
	}
}

func isTrue(v string) bool {
	switch strings.ToLower(v) {
	case "1", "yes", "true", "on":
		return true
	}
	return false
}

// polkitAllows reports whether some polkit rule names both the
// manage-units action and unit: a heuristic (rules are JavaScript), but
// the shipped example and hand-written ones name both literally.
func polkitAllows(root, unit string) bool {
	for _, d := range polkitDirs {
		matches, _ := filepath.Glob(filepath.Join(root, d, "*.rules"))
		for _, m := range matches {
			data, err := os.ReadFile(m)
			if err != nil {
				continue
			}
			s := string(data)
			if strings.Contains(s, "org.freedesktop.systemd1.manage-units") && strings.Contains(s, `"`+unit+`"`) {
				return true
			}
		}
	}
	return false
}

// unixPath returns the file path of a unix:// address or a bare path.
func unixPath(addr string) (string, bool) {
	switch {
	case strings.HasPrefix(addr, "unix://"):
		return strings.TrimPrefix(addr, "unix://"), true
	case strings.HasPrefix(addr, "/"):
		return addr, true
	}
	return "", false
}

func under(p, dir string) bool {
	p, dir = path.Clean(p), path.Clean(dir)
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// dbEntry is one line of /etc/passwd or /etc/group.
type dbEntry struct {
	name    string
	gid     string
	members []string
}

// lookupID finds the entry with the numeric id in a passwd or group file.
func lookupID(root, file string, id uint32) (dbEntry, bool) {
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return dbEntry{}, false
	}
	want := fmt.Sprint(id)
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 4 || f[2] != want {
			continue
		}
		e := dbEntry{name: f[0], gid: f[2]}
		if file == "etc/group" && f[3] != "" {
			e.members = strings.Split(f[3], ",")
		}
		return e, true
	}
	return dbEntry{}, false
}

// hasMember: user is listed in the group, or has it as primary group.
func (g dbEntry) hasMember(root, user string) bool {
	if slices.Contains(g.members, user) {
		return true
	}
	data, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 4 && f[0] == user && f[3] == g.gid {
			return true
		}
	}
	return false
}
