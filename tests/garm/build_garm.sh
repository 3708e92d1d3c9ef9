#!/usr/bin/env bash
# Builds garm and garm-cli from garm's source tarball (with its vendor/ directory) into a cache
# keyed by the tarball's SHA-256, and prints the directory holding the two executables on its
# last line. Go comes from Debian's unstable suite: its .debs are fetched under a private apt
# configuration (own sources list, lists and cache) and unpacked with dpkg-deb into the cache,
# so nothing of the host changes. Exits 77 (skipped) when the tarball is absent.
#   build_garm.sh [TARBALL_DIR] [CACHE_DIR]
# TARBALL_DIR defaults to $GARM_EDGE_GARM_SOURCE_DIR, then ../shared/third_party/ beside the
# repository; CACHE_DIR to $GARM_EDGE_GARM_CACHE, then /var/cache/garm-edge-garm (as root) or
# ~/.cache/garm-edge-garm.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
source_dir=${1:-${GARM_EDGE_GARM_SOURCE_DIR:-$repo/../shared/third_party}}
default_cache=/var/cache/garm-edge-garm
[ "$(id -u)" -eq 0 ] || default_cache=${XDG_CACHE_HOME:-$HOME/.cache}/garm-edge-garm
cache=${2:-${GARM_EDGE_GARM_CACHE:-$default_cache}}
go_version=1.26

tarball=$(find "$source_dir" -maxdepth 1 -name 'garm-*.tar.xz' 2>/dev/null | sort | tail -n 1)
if [ -z "$tarball" ]; then
  echo "skipped: no garm-*.tar.xz in $source_dir (set GARM_EDGE_GARM_SOURCE_DIR)" >&2
  exit 77
fi
hash=$(sha256sum "$tarball" | cut -c1-16)
out="$cache/garm-$hash"
if [ -x "$out/bin/garm" ] && [ -x "$out/bin/garm-cli" ]; then
  echo "garm up to date: $(basename "$tarball") ($hash)" >&2
  echo "$out/bin"
  exit 0
fi
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock -w 1800 9

# Go from sid, unpacked privately.
goroot="$cache/go-$go_version/usr/lib/go-$go_version"
if [ ! -x "$goroot/bin/go" ]; then
  apt_dir="$cache/apt"
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
  echo "deb http://deb.debian.org/debian sid main" >"$apt_dir/sources.list"
  apt_options=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o Dir::Etc::sourceparts=-
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
    -o APT::Get::List-Cleanup=0 -o Acquire::Retries=3 -o Debug::NoLocking=1
    -o APT::Sandbox::User=root)
  for attempt in 1 2 3; do
    timeout 600 apt-get -q "${apt_options[@]}" update >/dev/null && break
    [ "$attempt" -eq 3 ] && { echo "FAILED: apt-get update of Debian sid" >&2; exit 1; }
    sleep 10
  done
  (cd "$apt_dir/debs" && rm -f ./*.deb &&
    timeout 900 apt-get -q "${apt_options[@]}" download "golang-$go_version-go" "golang-$go_version-src" >/dev/null)
  rm -rf "$cache/go-$go_version.new"
  for deb in "$apt_dir/debs"/*.deb; do dpkg-deb -x "$deb" "$cache/go-$go_version.new"; done
  rm -rf "$cache/go-$go_version"
  mv "$cache/go-$go_version.new" "$cache/go-$go_version"
fi

# garm builds against Debian's SQLite (the tarball leaves out the amalgamation).
if ! dpkg-query -W -f='${Status}' libsqlite3-dev 2>/dev/null | grep -q 'install ok installed'; then
  [ "$(id -u)" -eq 0 ] || { echo "FAILED: libsqlite3-dev is missing; install it as root" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -q --no-install-recommends \
    -o DPkg::Lock::Timeout=300 libsqlite3-dev >/dev/null
fi

work="$cache/src-$hash"
rm -rf "$work" "$out"
mkdir -p "$work"
tar -xJf "$tarball" -C "$work" --strip-components=1
started=$(date +%s)
(cd "$work" &&
  env GOROOT="$goroot" PATH="$goroot/bin:$PATH" GOTOOLCHAIN=local GOFLAGS=-mod=vendor GOPROXY=off \
    GOCACHE="$cache/gocache" GOPATH="$cache/gopath" CGO_ENABLED=1 \
    go build -p 2 -trimpath -o "$out.new/bin/" \
      -tags osusergo,netgo,sqlite_omit_load_extension,libsqlite3 ./cmd/garm ./cmd/garm-cli)
mv "$out.new" "$out"
rm -rf "$work"
echo "built garm and garm-cli from $(basename "$tarball") in $(($(date +%s) - started)) s" >&2
echo "$out/bin"
