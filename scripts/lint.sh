#!/usr/bin/env bash
# The lint tier: clang-format over the tree, shellcheck over every shell script, the layering
# rules (which folder may include which), clang-tidy's agreed checks (.clang-tidy) over the
# product code, and the shipped alert rules and dashboard (promtool). Prints every finding and fails when there is one.
# Usage: scripts/lint.sh SOURCE_DIR BUILD_DIR   (BUILD_DIR holds compile_commands.json)
set -euo pipefail
source_dir=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
cd "$source_dir"
failed=()

section() { printf '\n== %s\n' "$*"; }

section "clang-format (.clang-format)"
git ls-files '*.cpp' '*.hpp' | xargs clang-format --dry-run --Werror || failed+=(clang-format)

section "shellcheck"
mapfile -t scripts < <(git ls-files '*.sh' .ci/run packaging/agent/postinst packaging/agent/prerm \
  packaging/agent/postrm packaging/provider/postinst packaging/provider/prerm packaging/provider/postrm)
shellcheck -x "${scripts[@]}" && echo "${#scripts[@]} scripts clean" || failed+=(shellcheck)

section "layering: arrows point down"
# folder: the folders its files may include from (besides itself and the standard library).
declare -A allowed=(
  [common]=""
  [wire]="common"
  [userdata]="wire common"
  [net]="common"
  [hypervisor]="common"
  [agent/base]="hypervisor wire net common"
  [agent/instances]="agent/base hypervisor userdata wire net common"
  [agent/runner_archives]="agent/base net common"
  [agent/images]="agent/instances agent/runner_archives agent/base hypervisor net common"
  [agent/guests]="agent/instances agent/runner_archives agent/base hypervisor userdata wire net common"
  [agent/api]="agent/instances agent/base hypervisor wire net common"
  [agent/caches]="agent/images agent/instances agent/base hypervisor userdata net common"
  [agent/mirror]="agent/base net common"
  [agent/daemon]="agent/caches agent/mirror agent/api agent/guests agent/images agent/runner_archives agent/instances agent/base hypervisor userdata wire net common"
  [provider]="wire net common"
  [hub]="wire net common"
)
layering_ok=1
for folder in "${!allowed[@]}"; do
  for file in $(git ls-files "$folder/*.cpp" "$folder/*.hpp"); do
    while IFS= read -r included; do
      target=${included%/*}
      [ "$target" = "$folder" ] && continue
      ok=0
      for permitted in ${allowed[$folder]}; do
        [ "$target" = "$permitted" ] && ok=1
      done
      if [ "$ok" = 0 ]; then
        echo "$file includes $included: $folder may not depend on $target"
        layering_ok=0
      fi
    done < <(sed -n 's/^#include "\(.*\)"$/\1/p' "$file")
  done
done
if [ "$layering_ok" = 1 ]; then echo "every include points down"; else failed+=(layering); fi

section "clang-tidy (.clang-tidy)"
# Findings are read from the output: with WarningsAsErrors clang-tidy also exits non-zero, and
# so does xargs when it is missing, which pipefail would otherwise mix up.
if ! command -v clang-tidy >/dev/null; then
  echo "clang-tidy is not installed"
  failed+=(clang-tidy)
else
  # clang-tidy reads the sources 16 to a unit, as the presets compile them: each unit parses
  # Asio, mbedTLS and nlohmann_json once for 16 files (a fifth of the time one entry per source
  # took). The units' sources are included files to clang-tidy, so the header filter names
  # them too, and the tier fails if a product source is in no unit.
  compile_db=$build/lint-compile-db
  cmake -S "$source_dir" -B "$compile_db" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 -DGARM_EDGE_BUILD_TESTS=OFF \
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
  sources="/(agent/[a-z_]+|common|hypervisor|net|provider|userdata|wire|hub)/[^/]+\\.cpp$"
  header_filter="$(sed -n "s/^HeaderFilterRegex: '\(.*\)'$/\1/p" .clang-tidy)|$source_dir$sources"
  units=$(python3 - "$compile_db" "$source_dir" <<'PYTHON'
import json, re, subprocess, sys
compile_db, source_dir = sys.argv[1], sys.argv[2]
entries = [e["file"] for e in json.load(open(compile_db + "/compile_commands.json"))]
covered = set()
for entry in entries:
    if "/Unity/" in entry:
        covered.update(re.findall(r'#include "(.*)"', open(entry).read()))
    else:
        covered.add(entry)
product = subprocess.run(["git", "ls-files"] + ["%s/*.cpp" % d for d in (
    "agent", "common", "hypervisor", "net", "provider", "userdata", "wire", "hub")],
    cwd=source_dir, capture_output=True, text=True, check=True).stdout.split()
missing = [f for f in product if "%s/%s" % (source_dir, f) not in covered]
if missing:
    sys.exit("clang-tidy would not read: %s" % " ".join(missing))
print("\n".join(entries))
PYTHON
  ) || failed+=(clang-tidy-coverage)
  tidy=$(xargs -P "$(nproc)" -n 1 clang-tidy -p "$compile_db" --quiet \
      --config-file="$source_dir/.clang-tidy" --header-filter="$header_filter" \
      --extra-arg=-Wno-unknown-warning-option <<<"$units" 2>&1 || true)
  if grep -E -A3 '(warning|error):' <<<"$tidy"; then
    failed+=(clang-tidy)
  else
    echo "no findings"
  fi
fi

section "alert rules and dashboard (promtool, metric names the code exports)"
python3 tests/monitoring/check_monitoring.py "$source_dir" || failed+=(monitoring)

section "presets the README gives: each exists and a tier builds it"
# preset: what builds it when scripts/test.sh runs (every preset the README gives must build).
declare -A built_by=(
  [debug]="scripts/test.sh"
  [asan]="tests/run_sanitized.sh"
  [fuzz]="tests/fuzz/run_fuzzers.sh"
  [package]="tests/package/run_deb_install.sh"
  [demo]="scripts/demo.sh (the README's first command)"
  [cross-arm64]="scripts/cross-build.sh arm64"
  [cross-armhf]="scripts/cross-build.sh armhf"
)
presets_ok=1
mapfile -t defined < <(python3 -c 'import json,sys; [print(p["name"]) for p in json.load(open(sys.argv[1]))["configurePresets"] if not p.get("hidden")]' CMakePresets.json)
while read -r preset; do
  if ! printf '%s\n' "${defined[@]}" | grep -qx -- "$preset"; then
    echo "README.md gives preset $preset, which CMakePresets.json does not define"
    presets_ok=0
  elif [ -z "${built_by[$preset]:-}" ]; then
    echo "README.md gives preset $preset, which no tier builds"
    presets_ok=0
  fi
done < <(grep -oE -- '--preset [a-z0-9-]+' README.md | awk '{print $2}' | sort -u)
if [ "$presets_ok" = 1 ]; then echo "every preset given is built"; else failed+=(presets); fi

if [ "${#failed[@]}" -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "lint: clean"
