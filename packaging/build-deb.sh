#!/usr/bin/env bash
# Builds the vigil Debian package in one command:
#
#   packaging/build-deb.sh [OUTDIR]        # default OUTDIR: dist/
#
# VERSION (default: from git, e.g. 0.3.1 for tag v0.3.1, else
# 0.0.0~git20261201.1a2b3c4) and GOARCH (default: the Go toolchain's) may be
# set in the environment. Needs go and dpkg-deb (package dpkg), nothing else;
# runs unprivileged (files are owned by root in the archive via
# --root-owner-group). Prints the path of the .deb it wrote.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-dist}
arch=${GOARCH:-$(go env GOARCH)}
case "$arch" in
  amd64|arm64|riscv64|ppc64el|s390x) debarch=$arch ;;
  arm) debarch=armhf ;;
  386) debarch=i386 ;;
  ppc64le) debarch=ppc64el ;;
  *) echo "build-deb: no Debian architecture for GOARCH=$arch" >&2; exit 2 ;;
esac

if [ -z "${VERSION:-}" ]; then
  if tag=$(git describe --tags --exact-match 2>/dev/null); then
    VERSION=${tag#v}
  else
    VERSION="0.0.0~git$(git log -1 --format=%cd --date=format:%Y%m%d 2>/dev/null || date +%Y%m%d).$(git rev-parse --short=7 HEAD 2>/dev/null || echo unknown)"
  fi
fi
# Debian versions start with a digit and allow [A-Za-z0-9.+~-].
if ! [[ "$VERSION" =~ ^[0-9][A-Za-z0-9.+~-]*$ ]]; then
  echo "build-deb: VERSION '$VERSION' is not a Debian version (must start with a digit)" >&2
  exit 2
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
install -d "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/default" "$root/etc/vigil" \
  "$root/usr/share/doc/vigil/examples" "$root/usr/share/vigil/monitoring/grafana"

# Static binaries: the node may run any glibc, or none (a distroless image).
# vigil-demo is `vigil demo` (the simulated engine stays out of vigil's own
# binary); vigil runs it from beside itself.
for cmd in vigil vigil-demo; do
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath \
    -ldflags "-s -w -X github.com/vigil-dev/vigil/internal/daemon.version=$VERSION" -o "$root/usr/bin/$cmd" "./cmd/$cmd"
done

install -m 0644 systemd/vigil.service "$root/lib/systemd/system/vigil.service"
install -m 0644 systemd/vigil@.service "$root/lib/systemd/system/vigil@.service"
install -m 0644 systemd/vigil.env "$root/etc/default/vigil"
install -m 0640 configs/vigil.yaml "$root/etc/vigil/vigil.yaml"
install -m 0644 configs/example.yaml systemd/restart-systemd.conf systemd/50-vigil-restart-engine.rules systemd/vigil.socket \
  "$root/usr/share/doc/vigil/examples/"
install -m 0644 monitoring/*.yml "$root/usr/share/vigil/monitoring/"
install -m 0644 monitoring/grafana/vigil.json "$root/usr/share/vigil/monitoring/grafana/"
install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$root/DEBIAN/"
printf '/etc/default/vigil\n/etc/vigil/vigil.yaml\n' >"$root/DEBIAN/conffiles"

size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<CONTROL
Package: vigil
Version: $VERSION
Architecture: $debarch
Maintainer: vigil developers <vigil@vigil-dev.invalid>
Installed-Size: $size
Section: admin
Priority: optional
Homepage: https://github.com/vigil-dev/vigil
Description: watchdog and admission limiter for an LLM inference engine
 vigil keeps an LLM inference engine (vLLM) serving under overload: a
 watchdog that tells a saturated engine from a hung one by counter progress
 and recovers only a hung or dead engine (drain at HAProxy, restart the
 container, restore), and an admission limiter in front of the engine that
 keeps its queue shallow so retries never turn into a metastable failure.
CONTROL

mkdir -p "$out"
deb="$out/vigil_${VERSION}_${debarch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
