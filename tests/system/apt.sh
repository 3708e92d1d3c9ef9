# shellcheck shell=bash
# Sourced by the system-tier scripts. install_missing PACKAGE...: installs the packages that are
# not installed yet (no recommends; apt-get update retried, everything under a deadline) and
# leaves their names in $missing, so a caller can tell whether anything changed.
install_missing() {
  missing=()
  local package
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    timeout 300 apt-get update -q -o Acquire::Retries=3 >/dev/null
    timeout 900 apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 "${missing[@]}" >/dev/null
  fi
}
