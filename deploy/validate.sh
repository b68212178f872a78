#!/usr/bin/env bash
# Validate docker-compose.yml and k8s/ offline (no Docker engine, no cluster).
# Exits non-zero if any check fails; runs every check and reports all problems.
#
#   deploy/validate.sh                 # from anywhere; works on the repo this script is in
#   VENV=/path/to/venv K8S_VERSION=1.36.0 deploy/validate.sh
#
# Needs: the project venv with kubernetes-validate (dev extra), and Debian's docker-compose
# (v1), which is installed with apt-get when missing (as root, or through passwordless sudo).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

VENV=${VENV:-.venv}
K8S_VERSION=${K8S_VERSION:-1.37.0}
COMPOSE_FILE=docker-compose.yml
K8S_DIR=k8s
KV="$VENV/bin/kubernetes-validate"
PY="$VENV/bin/python"

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
step() { echo; echo "== $*"; }

# --- (a) docker-compose ------------------------------------------------------------------
step "docker-compose config ($COMPOSE_FILE)"
if ! command -v docker-compose >/dev/null 2>&1; then
    echo "docker-compose not found; installing Debian's docker-compose package"
    if [ "$(id -u)" -eq 0 ]; then SUDO=(); else SUDO=(sudo -n); fi
    if ! { "${SUDO[@]}" apt-get update -qq \
           && DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq \
                  --no-install-recommends docker-compose >/dev/null; }; then
        fail "could not install docker-compose (needs root or passwordless sudo)"
    fi
fi
if command -v docker-compose >/dev/null 2>&1; then
    docker-compose version --short 2>/dev/null | sed 's/^/docker-compose /'
    # Required variables get throwaway values so interpolation can be checked.
    if POSTGRES_PASSWORD=${POSTGRES_PASSWORD:-validate-only} \
       docker-compose -f "$COMPOSE_FILE" config -q; then
        echo "OK $COMPOSE_FILE"
    else
        fail "$COMPOSE_FILE is not valid"
    fi
fi

# --- (b) Kubernetes manifests ------------------------------------------------------------
manifests=()
for f in "$K8S_DIR"/*.yaml "$K8S_DIR"/*.yml; do
    [ -e "$f" ] || continue
    case "$(basename "$f")" in kustomization.yaml|kustomization.yml|Kustomization) continue ;; esac
    manifests+=("$f")
done

step "repository checks (duplicate YAML keys, kustomization resources, labels)"
if [ ! -x "$PY" ]; then
    fail "no python in venv $VENV"
elif ! "$PY" - "$K8S_DIR" "$COMPOSE_FILE" "${manifests[@]}" <<'PYEOF'
import os
import sys

import yaml

k8s_dir, compose_file, manifests = sys.argv[1], sys.argv[2], sys.argv[3:]
errors = []


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (PyYAML silently keeps the last one)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool, type(None))):
                continue
            if key in seen:
                errors.append(f"{self.name}:{key_node.start_mark.line + 1}: duplicate key {key!r}")
            seen.add(key)
        return super().construct_mapping(node, deep)


def load_all(path):
    with open(path) as f:
        loader = StrictLoader(f)
        loader.name = path
        try:
            docs = []
            while loader.check_data():
                doc = loader.get_data()
                if doc:
                    docs.append(doc)
            return docs
        except yaml.YAMLError as e:
            errors.append(f"{path}: YAML error: {e}")
            return []
        finally:
            loader.dispose()


load_all(compose_file)

kust_path = os.path.join(k8s_dir, "kustomization.yaml")
if not os.path.exists(kust_path):
    errors.append(f"{kust_path}: missing")
else:
    docs = load_all(kust_path)
    resources = (docs[0].get("resources") if docs and isinstance(docs[0], dict) else None) or []
    listed = [os.path.normpath(os.path.join(k8s_dir, r)) for r in resources]
    for r in sorted({r for r in listed if listed.count(r) > 1}):
        errors.append(f"{kust_path}: {r} listed twice")
    for r in listed:
        if not os.path.isfile(r):
            errors.append(f"{kust_path}: lists {r}, which does not exist")
    for m in manifests:
        if os.path.normpath(m) not in listed:
            errors.append(f"{kust_path}: does not list {m}")

REQUIRED = ("app.kubernetes.io/name", "app.kubernetes.io/part-of")
for m in manifests:
    docs = load_all(m)
    if not docs:
        errors.append(f"{m}: no Kubernetes objects")
    for doc in docs:
        if not isinstance(doc, dict):
            errors.append(f"{m}: a document is not a mapping")
            continue
        meta = doc.get("metadata") or {}
        what = f"{m}: {doc.get('kind')}/{meta.get('name')}"
        labelled = [("", meta)]
        template = (doc.get("spec") or {}).get("template")
        if isinstance(template, dict):
            labelled.append(("pod template ", template.get("metadata") or {}))
        for where, md in labelled:
            labels = md.get("labels") or {}
            missing = [k for k in REQUIRED if k not in labels]
            if missing:
                errors.append(f"{what}: {where}labels lack {', '.join(missing)}")
            elif labels["app.kubernetes.io/part-of"] != "o":
                errors.append(f"{what}: {where}app.kubernetes.io/part-of is not 'o'")

for e in errors:
    print(e)
sys.exit(1 if errors else 0)
PYEOF
then
    fail "repository checks"
else
    echo "OK duplicate keys, kustomization resources (${#manifests[@]} manifests), labels"
fi

step "kubernetes-validate --strict -k $K8S_VERSION"
if [ ${#manifests[@]} -eq 0 ]; then
    fail "no manifests in $K8S_DIR"
elif [ ! -x "$KV" ]; then
    fail "$KV not found (install the project's dev extra into $VENV, or set VENV)"
else
    out=$("$KV" --strict -k "$K8S_VERSION" "${manifests[@]}" 2>&1)
    rc=$?
    echo "$out"
    # Unknown kinds/apiVersions only WARN with rc 0 (no schema): treat them as failures too.
    if [ $rc -ne 0 ] || grep -qE '^(WARN|ERROR|FATAL)' <<<"$out"; then
        fail "kubernetes-validate (rc=$rc)"
    fi
fi

echo
if [ $failures -ne 0 ]; then
    echo "validate: $failures check(s) FAILED" >&2
    exit 1
fi
echo "validate: all checks passed"
