#!/usr/bin/env bash
# The Pythons O supports (3.13, 3.12, 3.11) that run on this machine, newest first, one a line:
# "VERSION PATH". Used by the Makefile (which one builds .venv) and by the install check (CI
# installs O on each one found).
#
#   scripts/pythons.sh              # every supported version found
#   scripts/pythons.sh --newest     # the newest one's path; exits 1, saying what to do, if none
#   scripts/pythons.sh --use NAME   # NAME's path if it runs and is supported (else exits 1,
#                                   # saying why); with NAME empty, as --newest
#
# A name on PATH counts only if it runs and is the version it says: a pyenv shim of a version
# that is installed but not selected (`pyenv global 3.11.7` with 3.13.0 installed) is on PATH
# and fails with "command not found", so pyenv's installed versions are looked up directly too.
set -uo pipefail

SUPPORTED=(3.13 3.12 3.11)

# "X.Y PATH" of a Python that runs, or nothing.
probe() {
    "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2], sys.executable)' 2>/dev/null
}

find_version() {
    local want=$1 name found root dir
    for name in "python$want" python3; do
        command -v "$name" >/dev/null 2>&1 || continue
        found=$(probe "$name") || continue
        [ "${found%% *}" = "$want" ] && { echo "$found"; return 0; }
    done
    root=${PYENV_ROOT:-$HOME/.pyenv}
    # The newest patch release first (3.13.10 after 3.13.9).
    for dir in $(ls -d "$root/versions/$want".* 2>/dev/null | sort -rV); do
        [ -x "$dir/bin/python$want" ] || continue
        found=$(probe "$dir/bin/python$want") || continue
        [ "${found%% *}" = "$want" ] && { echo "$found"; return 0; }
    done
    return 1
}

if [ "${1:-}" = "--use" ] && [ -n "${2:-}" ]; then
    found=$(probe "$2") || {
        echo "PYTHON=$2 does not run here (not installed, or a pyenv shim of a version not selected?)" >&2
        exit 1
    }
    for v in "${SUPPORTED[@]}"; do
        [ "${found%% *}" = "$v" ] && { echo "${found#* }"; exit 0; }
    done
    echo "PYTHON=$2 is Python ${found%% *}; O supports 3.11, 3.12 and 3.13" >&2
    exit 1
fi

if [ "${1:-}" = "--newest" ] || [ "${1:-}" = "--use" ]; then
    for v in "${SUPPORTED[@]}"; do
        if found=$(find_version "$v"); then
            echo "${found#* }"
            exit 0
        fi
    done
    cat >&2 <<'MSG'
O needs Python 3.11, 3.12 or 3.13, and none was found (looked for python3.13, python3.12,
python3.11 and python3 on PATH, and in pyenv's versions). Install one, e.g.
  apt-get install python3 python3-venv   (Debian 12 has 3.11)
  pyenv install 3.13
or name one: make ... PYTHON=/path/to/python3.x
MSG
    exit 1
fi

for v in "${SUPPORTED[@]}"; do
    find_version "$v"
done
exit 0
