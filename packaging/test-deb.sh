#!/usr/bin/env bash
# The vigil .deb, tested in two depths:
#
#   packaging/test-deb.sh             # build and inspect; installs nothing
#   packaging/test-deb.sh --install   # and then install it on this machine
#
# Inspect (any user, any machine): the archive's contents and ownership,
# its conffiles, its maintainer scripts (present, executable, the ones in
# packaging/debian, valid sh), and the packaged binaries run from the
# unpacked archive (version, static, `vigil demo` finding the vigil-demo
# beside it).
#
# --install (test.sh passes it only in CI, CI=true, or when asked,
# VIGIL_TEST_DEB_INSTALL=1; as root): takes the package through its life
# in the machine's real root: install, reinstall and upgrade with an
# edited conffile, remove, purge. It refuses to run where a vigil package
# or user already exists, and purges whatever it installed on any exit.
# There is no systemd as PID 1 in CI containers: the maintainer scripts
# must cope, and the unit is checked offline with systemd-analyze.
set -euo pipefail
cd "$(dirname "$0")/.."

install=
case "${1:-}" in
  --install) install=1 ;;
  "") ;;
  *) echo "usage: $0 [--install]" >&2; exit 2 ;;
esac

fail() { echo "test-deb: FAIL: $*" >&2; exit 1; }
ok() { echo "test-deb: ok: $*"; }
# On a machine with a real vigil install the install test must not run;
# outside CI that is a skip, in CI (a fresh machine) a failure.
refuse() {
  if [ "${CI:-}" = "true" ]; then fail "$*"; fi
  echo "test-deb: SKIPPED: $*"; exit 0
}

if [ -n "$install" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    fail "--install must run as root (dpkg -i)"
  fi
  if dpkg-query -W -f='${Status}' vigil 2>/dev/null | grep -q 'installed\|config-files'; then
    refuse "a vigil package is already on this machine; not touching it"
  fi
  if getent passwd vigil >/dev/null || getent group vigil >/dev/null || [ -e /etc/vigil ]; then
    refuse "a vigil user, group or /etc/vigil already exists on this machine; not touching it"
  fi
fi

work=$(mktemp -d)
cleanup() {
  if [ -n "$install" ]; then
    rm -rf /etc/systemd/system/vigil.service.d
    if dpkg-query -W vigil >/dev/null 2>&1; then
      dpkg --purge vigil >/dev/null 2>&1 || true
    fi
  fi
  rm -rf "$work"
}
trap cleanup EXIT

v1=1.0.0~ci1 v2=1.0.1~ci1
deb1=$(VERSION=$v1 packaging/build-deb.sh "$work")
ok "built $(basename "$deb1")"

# The archive: what it holds and which files are conffiles.
listing=$(dpkg-deb -c "$deb1")
for f in ./usr/bin/vigil ./usr/bin/vigil-demo ./lib/systemd/system/vigil.service ./lib/systemd/system/vigil@.service ./etc/default/vigil ./etc/vigil/vigil.yaml \
  ./usr/share/doc/vigil/examples/restart-systemd.conf ./usr/share/doc/vigil/examples/50-vigil-restart-engine.rules \
  ./usr/share/vigil/monitoring/vigil-rules.yml ./usr/share/vigil/monitoring/grafana/vigil.json; do
  grep -q " $f\$" <<<"$listing" || fail "$f missing from the package"
done
! grep -v ' root/root ' <<<"$listing" | grep . || fail "files not owned by root/root in the archive"
grep -q '^-rw-r----- root/root .* ./etc/vigil/vigil.yaml$' <<<"$listing" || fail "/etc/vigil/vigil.yaml is not 0640 in the archive"
[ "$(dpkg-deb -f "$deb1" Version)" = "$v1" ] || fail "control Version is not $v1"
[ "$(dpkg-deb --ctrl-tarfile "$deb1" | tar -xO ./conffiles)" = $'/etc/default/vigil\n/etc/vigil/vigil.yaml' ] ||
  fail "conffiles are not /etc/default/vigil and /etc/vigil/vigil.yaml"
ok "package contents, ownership and conffiles"

# The maintainer scripts: the ones in packaging/debian, executable, valid sh.
ctrl=$work/control
mkdir -p "$ctrl"
dpkg-deb -e "$deb1" "$ctrl"
for script in postinst prerm postrm; do
  [ -x "$ctrl/$script" ] || fail "maintainer script $script missing or not executable"
  cmp -s "$ctrl/$script" "packaging/debian/$script" || fail "maintainer script $script differs from packaging/debian/$script"
  [ "$(head -1 "$ctrl/$script")" = "#!/bin/sh" ] || fail "$script does not start with #!/bin/sh"
  sh -n "$ctrl/$script" || fail "$script is not valid sh"
  grep -q '^set -e$' "$ctrl/$script" || fail "$script does not set -e"
done
for s in "$ctrl"/*; do
  case "$(basename "$s")" in control|conffiles|md5sums|postinst|prerm|postrm) ;; *) fail "unexpected control file $(basename "$s")" ;; esac
done
ok "maintainer scripts postinst, prerm, postrm: packaged as written, executable, valid sh"

# The binaries, run from the unpacked archive (nothing installed).
unpacked=$work/unpacked
dpkg-deb -x "$deb1" "$unpacked"
[ "$("$unpacked/usr/bin/vigil" --version)" = "vigil $v1" ] || fail "packaged vigil --version says '$("$unpacked/usr/bin/vigil" --version)', want 'vigil $v1'"
go version -m "$unpacked/usr/bin/vigil" | grep -q 'CGO_ENABLED=0' || fail "the packaged vigil is not built with CGO_ENABLED=0"
# `vigil demo` runs the vigil-demo beside it (-h: its usage, exit 2), from
# outside any source tree.
code=0
(cd "$work" && "$unpacked/usr/bin/vigil" demo -h >/dev/null 2>"$work/demo.log") || code=$?
[ "$code" = 2 ] && grep -q -- '-v' "$work/demo.log" || { cat "$work/demo.log"; fail "vigil demo -h exited $code without the demo's usage"; }
"$unpacked/usr/bin/vigil" check-config "$unpacked/etc/vigil/vigil.yaml" >"$work/check.log" 2>&1 ||
  { cat "$work/check.log"; fail "vigil check-config of the packaged /etc/vigil/vigil.yaml"; }
ok "the packaged vigil $v1 runs unpacked: static, its demo beside it, its config checks"

if [ -z "$install" ]; then
  echo "test-deb: not installed (test.sh installs it in CI, CI=true, or with VIGIL_TEST_DEB_INSTALL=1)"
  exit 0
fi

deb2=$(VERSION=$v2 packaging/build-deb.sh "$work")
ok "built $(basename "$deb2")"

# --- install
dpkg -i "$deb1" </dev/null >"$work/install.log" 2>&1 || { cat "$work/install.log"; fail "dpkg -i $deb1"; }
[ "$(/usr/bin/vigil --version)" = "vigil $v1" ] || fail "vigil --version says '$(/usr/bin/vigil --version)', want 'vigil $v1'"
[ "$(/usr/bin/vigil version)" = "vigil $v1" ] || fail "vigil version"
go version -m /usr/bin/vigil | grep -q 'CGO_ENABLED=0' || fail "/usr/bin/vigil is not built with CGO_ENABLED=0"
ok "installed; vigil --version = $v1, static"
# `vigil demo` runs the vigil-demo installed beside it (-h: its usage, exit 2).
code=0
/usr/bin/vigil demo -h >/dev/null 2>"$work/demo.log" || code=$?
[ "$code" = 2 ] && grep -q -- '-v' "$work/demo.log" || { cat "$work/demo.log"; fail "vigil demo -h exited $code without the demo's usage"; }
ok "vigil demo runs /usr/bin/vigil-demo"

getent passwd vigil >/dev/null || fail "no vigil user"
uid=$(id -u vigil)
[ "$uid" -lt 1000 ] || fail "vigil uid $uid is not a system uid"
[ "$(getent passwd vigil | cut -d: -f7)" = /usr/sbin/nologin ] || fail "vigil has a login shell"
for g in docker haproxy; do
  if getent group "$g" >/dev/null; then
    id -nG vigil | tr ' ' '\n' | grep -qx "$g" || fail "vigil is not in the existing group $g"
  fi
done
[ "$(stat -c '%U:%G %a' /etc/vigil/vigil.yaml)" = "root:vigil 640" ] || fail "/etc/vigil/vigil.yaml is $(stat -c '%U:%G %a' /etc/vigil/vigil.yaml)"
[ "$(stat -c '%U:%G %a' /var/lib/vigil)" = "vigil:vigil 750" ] || fail "/var/lib/vigil is $(stat -c '%U:%G %a' /var/lib/vigil)"
[ -L /etc/systemd/system/multi-user.target.wants/vigil.service ] || fail "vigil.service not enabled"
ok "user vigil (uid $uid, groups: $(id -nG vigil)), config 0640 root:vigil, state dir, unit enabled"

runuser -u vigil -- /usr/bin/vigil check-config /etc/vigil/vigil.yaml >"$work/check.log" 2>&1 ||
  { cat "$work/check.log"; fail "vigil check-config /etc/vigil/vigil.yaml (as user vigil)"; }
ok "vigil check-config /etc/vigil/vigil.yaml passes as user vigil"

# check-config knows what the installed unit forbids: restart.kind systemd
# without the polkit rule and drop-in.
cat >"$work/systemd-restart.yaml" <<YAML
engine:
  url: http://127.0.0.1:8000
watchdog:
  state_file: $work/state.json
restart:
  kind: systemd
  systemd:
    unit: vllm-test-engine
YAML
/usr/bin/vigil check-config "$work/systemd-restart.yaml" >/dev/null 2>"$work/warn.log" || fail "check-config of a systemd-restart config"
grep -q 'no polkit rule.*vllm-test-engine.service' "$work/warn.log" || { cat "$work/warn.log"; fail "check-config did not warn about the missing polkit rule"; }
grep -q 'restart-systemd.conf is missing' "$work/warn.log" || { cat "$work/warn.log"; fail "check-config did not warn about the missing drop-in"; }
ok "check-config warns that restart.kind systemd needs the polkit rule and drop-in"

# --- the unit, offline
unit=/lib/systemd/system/vigil.service
! grep -q '^SupplementaryGroups=' "$unit" || fail "the unit names SupplementaryGroups (fails on hosts without them)"
grep '^ReadWritePaths=' "$unit" | tr ' ' '\n' | sed 's/^ReadWritePaths=//' | grep -v '^-' | grep . &&
  fail "a ReadWritePaths entry without '-' fails the unit where the path is absent"
if command -v systemd-analyze >/dev/null; then
  systemd-analyze verify "$unit" || fail "systemd-analyze verify $unit"
  exposure=$(systemd-analyze security --offline=yes "$unit" 2>/dev/null | sed -n 's/.*Overall exposure level for vigil.service: \([0-9.]*\).*/\1/p')
  [ -n "$exposure" ] || fail "systemd-analyze security gave no exposure level"
  awk -v e="$exposure" 'BEGIN { exit !(e <= 2.0) }' || fail "exposure $exposure is above 2.0 (README records 1.2)"
  install -D -m 0644 /usr/share/doc/vigil/examples/restart-systemd.conf /etc/systemd/system/vigil.service.d/restart-systemd.conf
  systemd-analyze verify "$unit" || fail "systemd-analyze verify with the restart-systemd drop-in"
  rm -rf /etc/systemd/system/vigil.service.d
  systemd-analyze verify /usr/share/doc/vigil/examples/vigil.socket "$unit" || fail "systemd-analyze verify vigil.socket"
  ok "systemd-analyze verify (with and without the drop-in, and the socket); exposure $exposure"
  # The template, as one of its instances (verify loads a file named
  # vigil@NAME.service as instance NAME).
  cp /lib/systemd/system/vigil@.service "$work/vigil@gpu0.service"
  systemd-analyze verify "$work/vigil@gpu0.service" || fail "systemd-analyze verify vigil@gpu0.service"
  iexposure=$(systemd-analyze security --offline=yes "$work/vigil@gpu0.service" 2>/dev/null | sed -n 's/.*Overall exposure level for vigil@gpu0.service: \([0-9.]*\).*/\1/p')
  awk -v e="${iexposure:-9}" 'BEGIN { exit !(e <= 2.0) }' || fail "vigil@gpu0 exposure ${iexposure:-none} is above 2.0"
  ok "systemd-analyze verify vigil@gpu0.service; exposure $iexposure"
else
  echo "test-deb: systemd-analyze not installed: unit not verified"
fi

# --- two vigil@ instances: check-config refuses what they share, and
# both run side by side as their units would run them (User=vigil,
# $STATE_DIRECTORY from StateDirectory=vigil/%i; no systemd as PID 1 here).
for n in 0 1; do
  cat >"/etc/vigil/gpu$n.yaml" <<YAML
node: ci-gpu$n
engine:
  url: http://127.0.0.1:$((18000 + n))
admission:
  listen: 127.0.0.1:$((18100 + n))
status:
  listen: 127.0.0.1:$((19200 + n))
YAML
  chown root:vigil "/etc/vigil/gpu$n.yaml"; chmod 0640 "/etc/vigil/gpu$n.yaml"
done
runuser -u vigil -- /usr/bin/vigil check-config /etc/vigil/gpu0.yaml /etc/vigil/gpu1.yaml >"$work/inst.log" 2>&1 ||
  { cat "$work/inst.log"; fail "check-config of two distinct instances"; }
sed 's/19201/19200/' /etc/vigil/gpu1.yaml >"$work/gpu1.yaml"
if /usr/bin/vigil check-config /etc/vigil/gpu0.yaml "$work/gpu1.yaml" >"$work/inst.log" 2>&1; then
  fail "check-config accepted two instances on one status port"
fi
grep -q 'status.listen 127.0.0.1:19200: the same port' "$work/inst.log" || { cat "$work/inst.log"; fail "check-config did not name the shared port"; }
ok "check-config: two instances pass, a shared status port is refused"
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pids=()
for n in 0 1; do
  install -d -o vigil -g vigil -m 0750 "/var/lib/vigil/gpu$n"
  STATE_DIRECTORY=/var/lib/vigil/gpu$n runuser -u vigil -- /usr/bin/vigil run --config "/etc/vigil/gpu$n.yaml" \
    >"$work/gpu$n.log" 2>&1 &
  pids+=($!)
done
for n in 0 1; do
  for _ in $(seq 100); do
    [ -s "/var/lib/vigil/gpu$n/state.json" ] && listening $((19200 + n)) && break
    sleep 0.1
  done
  [ -s "/var/lib/vigil/gpu$n/state.json" ] || { cat "$work/gpu$n.log"; fail "vigil@gpu$n wrote no /var/lib/vigil/gpu$n/state.json"; }
  listening $((19200 + n)) || { cat "$work/gpu$n.log"; fail "vigil@gpu$n does not listen on its status port"; }
done
kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true
rm -f /etc/vigil/gpu0.yaml /etc/vigil/gpu1.yaml; rm -rf /var/lib/vigil/gpu0 /var/lib/vigil/gpu1
ok "two instances ran side by side: own state directories, own ports"

# --- reinstall and upgrade keep an edited conffile and the state
echo "# edited by the operator" >>/etc/vigil/vigil.yaml
sed -i 's/^LOGRUS_LEVEL=info/LOGRUS_LEVEL=debug/' /etc/default/vigil
# Not state.json: a vigil run by hand on this machine may rewrite that.
echo kept >/var/lib/vigil/upgrade-marker
dpkg -i "$deb1" </dev/null >"$work/reinstall.log" 2>&1 || { cat "$work/reinstall.log"; fail "reinstall $deb1"; }
dpkg -i "$deb2" </dev/null >"$work/upgrade.log" 2>&1 || { cat "$work/upgrade.log"; fail "upgrade to $deb2"; }
[ "$(/usr/bin/vigil --version)" = "vigil $v2" ] || fail "after upgrade vigil --version says '$(/usr/bin/vigil --version)'"
grep -q '^# edited by the operator$' /etc/vigil/vigil.yaml || fail "upgrade lost the edit to /etc/vigil/vigil.yaml"
grep -q '^LOGRUS_LEVEL=debug$' /etc/default/vigil || fail "upgrade lost the edit to /etc/default/vigil"
[ ! -e /etc/vigil/vigil.yaml.dpkg-new ] && [ ! -e /etc/vigil/vigil.yaml.dpkg-dist ] || fail "dpkg left a .dpkg-new/.dpkg-dist"
grep -q kept /var/lib/vigil/upgrade-marker || fail "upgrade lost the state directory's contents"
[ "$(stat -c '%U:%G %a' /etc/vigil/vigil.yaml)" = "root:vigil 640" ] || fail "upgrade changed the config's ownership"
runuser -u vigil -- /usr/bin/vigil check-config /etc/vigil/vigil.yaml >/dev/null || fail "check-config after upgrade"
ok "reinstall and upgrade to $v2 kept the edited conffiles and the state directory"

# --- remove keeps config, state and user; purge leaves nothing
dpkg -r vigil </dev/null >"$work/remove.log" 2>&1 || { cat "$work/remove.log"; fail "dpkg -r vigil"; }
[ ! -e /usr/bin/vigil ] && [ ! -e "$unit" ] || fail "dpkg -r left the binary or the unit"
[ -f /etc/vigil/vigil.yaml ] && [ -f /var/lib/vigil/upgrade-marker ] && getent passwd vigil >/dev/null ||
  fail "dpkg -r removed config, state or user (purge does that)"
ok "dpkg -r removed the program, kept config, state and user"

dpkg --purge vigil </dev/null >"$work/purge.log" 2>&1 || { cat "$work/purge.log"; fail "dpkg --purge vigil"; }
left=()
while read -r f; do
  f=${f#.}
  case "$f" in /|/etc|/etc/default|/usr|/usr/bin|/usr/share|/usr/share/doc|/lib|/lib/systemd|/lib/systemd/system) continue ;; esac
  [ -e "$f" ] && left+=("$f")
done < <(dpkg-deb -c "$deb1" | awk '{print $6}' | sed 's:/$::')
for f in /var/lib/vigil /etc/vigil /etc/systemd/system/multi-user.target.wants/vigil.service \
  /etc/systemd/system/vigil.service /var/lib/systemd/deb-systemd-helper-enabled/vigil.service.dsh-also \
  /var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/vigil.service \
  /var/lib/systemd/deb-systemd-helper-masked/vigil.service; do
  [ -e "$f" ] || [ -L "$f" ] && left+=("$f")
done
getent passwd vigil >/dev/null && left+=("user vigil")
getent group vigil >/dev/null && left+=("group vigil")
dpkg-query -W vigil >/dev/null 2>&1 && left+=("dpkg database entry")
[ ${#left[@]} -eq 0 ] || fail "purge left: ${left[*]}"
ok "dpkg --purge left nothing behind"
