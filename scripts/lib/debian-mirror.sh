# shellcheck shell=bash
# Sourced by scripts that run debootstrap: debian_mirror prints the Debian 12 mirror apt uses.
# The only network CI has is the Debian mirror apt is configured with: use the same one.
# (No grep here: a file without a match would end the list under errexit and pipefail.)
apt_mirrors() {
  local file
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$file" ] || continue
    sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$file" |
      awk '$1 == "deb" && $3 == "bookworm" && $2 ~ /^https?:\/\// { print $2 }'
  done
  for file in /etc/apt/sources.list.d/*.sources; do
    [ -f "$file" ] || continue
    sed '/^[[:space:]]*#/d' "$file" | awk 'BEGIN { RS = ""; FS = "\n" }
      {
        types = ""; suites = ""; uris = ""; enabled = "yes"
        for (i = 1; i <= NF; i++) {
          split($i, kv, ":"); key = tolower(kv[1]); value = substr($i, length(kv[1]) + 2)
          if (key == "types") types = " " value " "
          else if (key == "suites") suites = " " value " "
          else if (key == "uris") uris = value
          else if (key == "enabled") enabled = value
        }
        if (types ~ /[ \t]deb[ \t]/ && suites ~ /[ \t]bookworm[ \t]/ && enabled !~ /no/) {
          n = split(uris, list, /[ \t]+/)
          for (i = 1; i <= n; i++) if (list[i] ~ /^https?:\/\//) { print list[i]; exit }
        }
      }'
  done
}

# The first of them, without a trailing slash; deb.debian.org when apt names none.
debian_mirror() {
  local mirrors mirror
  mapfile -t mirrors < <(apt_mirrors)
  mirror=${mirrors[0]:-http://deb.debian.org/debian}
  echo "${mirror%/}"
}
