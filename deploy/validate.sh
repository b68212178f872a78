#!/usr/bin/env bash
# Validate docker-compose.yml and k8s/ offline (no Docker engine, no cluster).
# Exits non-zero if any check fails; runs every check and reports all problems.
#
#   deploy/validate.sh                 # from anywhere; works on the repo this script is in
#   VENV=/path/to/venv K8S_VERSION=1.36.0 deploy/validate.sh
#
# Needs: the project venv (kubernetes-validate, jsonschema and PyYAML from the dev extra,
# nats-server from the embedded one), and Debian's docker-compose (v1), which is installed
# with apt-get when missing (as root, or through passwordless sudo). The overlays are built
# with `kubectl kustomize` (or `kustomize build`) when either is on the PATH; without them
# the base's files are checked as they are and the overlays are skipped, with a warning.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

VENV=${VENV:-.venv}
K8S_VERSION=${K8S_VERSION:-1.37.0}
COMPOSE_FILE=docker-compose.yml
K8S_DIR=k8s
TARGETS=(base overlays/dev overlays/prod)
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
RENDER=$(mktemp -d)
trap 'rm -rf "$RENDER"' EXIT

step "kustomize build (${TARGETS[*]})"
if command -v kubectl >/dev/null 2>&1; then KUSTOMIZE=(kubectl kustomize)
elif command -v kustomize >/dev/null 2>&1; then KUSTOMIZE=(kustomize build)
else KUSTOMIZE=()
fi
rendered=()
if [ ${#KUSTOMIZE[@]} -eq 0 ]; then
    echo "WARN no kubectl or kustomize on the PATH: the overlays are not built;"
    echo "     the base's files are checked as they are"
    for f in "$K8S_DIR"/base/*.yaml; do
        [ "$(basename "$f")" = kustomization.yaml ] || rendered+=("$f")
    done
else
    for t in "${TARGETS[@]}"; do
        out="$RENDER/${t//\//-}.yaml"
        if "${KUSTOMIZE[@]}" "$K8S_DIR/$t" > "$out" 2> "$RENDER/err"; then
            echo "OK $K8S_DIR/$t ($(grep -c '^kind:' "$out") objects) -> $(basename "$out")"
            rendered+=("$out")
        else
            cat "$RENDER/err"
            fail "kustomize build $K8S_DIR/$t"
        fi
    done
fi

step "repository checks (duplicate YAML keys, kustomization resources, labels)"
if [ ! -x "$PY" ]; then
    fail "no python in venv $VENV"
elif ! "$PY" - "$K8S_DIR" "$COMPOSE_FILE" "$RENDER" "${rendered[@]}" <<'PYEOF'
import glob
import os
import sys

import yaml

k8s_dir, compose_file, render_dir, rendered = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
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
sources = sorted(glob.glob(os.path.join(k8s_dir, "**", "*.yaml"), recursive=True))
for path in sources:
    load_all(path)

# Every kustomization lists files that exist; the base lists every manifest beside it.
for kust_path in [s for s in sources if os.path.basename(s) == "kustomization.yaml"]:
    folder = os.path.dirname(kust_path)
    docs = load_all(kust_path)
    resources = (docs[0].get("resources") if docs and isinstance(docs[0], dict) else None) or []
    listed = [os.path.normpath(os.path.join(folder, r)) for r in resources]
    for r in sorted({r for r in listed if listed.count(r) > 1}):
        errors.append(f"{kust_path}: {r} listed twice")
    for r in listed:
        if not os.path.exists(r):
            errors.append(f"{kust_path}: lists {r}, which does not exist")
    if os.path.basename(folder) == "base":
        for m in glob.glob(os.path.join(folder, "*.yaml")):
            if os.path.basename(m) != "kustomization.yaml" and os.path.normpath(m) not in listed:
                errors.append(f"{kust_path}: does not list {m}")

# Every object (and pod template) of every build carries O's labels.
REQUIRED = ("app.kubernetes.io/name", "app.kubernetes.io/part-of")
builtin, custom = [], []
for m in rendered:
    docs = load_all(m)
    if not docs:
        errors.append(f"{m}: no Kubernetes objects")
    for doc in docs:
        if not isinstance(doc, dict):
            errors.append(f"{m}: a document is not a mapping")
            continue
        group = str(doc.get("apiVersion", "")).rpartition("/")[0]
        (custom if "." in group and not group.endswith(".k8s.io") else builtin).append(doc)
        meta = doc.get("metadata") or {}
        what = f"{os.path.basename(m)}: {doc.get('kind')}/{meta.get('name')}"
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

# Built-in kinds for kubernetes-validate, custom ones (CRDs) for the bundled schemas.
with open(os.path.join(render_dir, "builtin.yaml"), "w") as out:
    yaml.safe_dump_all(builtin, out)
with open(os.path.join(render_dir, "custom.yaml"), "w") as out:
    yaml.safe_dump_all(custom, out)

for e in errors:
    print(e)
print(f"{len(builtin)} built-in and {len(custom)} custom objects in {len(rendered)} files")
sys.exit(1 if errors else 0)
PYEOF
then
    fail "repository checks"
else
    echo "OK duplicate keys, kustomization resources, labels"
fi

step "kubernetes-validate --strict -k $K8S_VERSION (built-in kinds)"
if [ ! -x "$KV" ]; then
    fail "$KV not found (install the project's dev extra into $VENV, or set VENV)"
elif [ ! -s "$RENDER/builtin.yaml" ]; then
    fail "no built-in objects to validate"
else
    out=$("$KV" --strict -k "$K8S_VERSION" "$RENDER/builtin.yaml" 2>&1)
    rc=$?
    # Unknown kinds/apiVersions only WARN with rc 0 (no schema): treat them as failures too.
    if [ $rc -ne 0 ] || grep -qE '^(WARN|ERROR|FATAL)' <<<"$out"; then
        echo "$out" | grep -vE '^INFO'
        fail "kubernetes-validate (rc=$rc)"
    else
        echo "OK $(grep -c '^INFO' <<<"$out") objects"
    fi
fi

step "custom resources (CloudNativePG, cert-manager) against deploy/schemas/"
if ! "$PY" deploy/checks/crds.py validate "$RENDER/custom.yaml"; then
    fail "custom resources"
else
    echo
fi

step "policy (deploy/checks/policy.py: requests, probes, non-root, PDBs, autoscalers, ...)"
# One build at a time (without kustomize: the base's files together, as one build).
if [ ${#KUSTOMIZE[@]} -eq 0 ]; then builds=("${rendered[*]}"); else builds=("${rendered[@]}"); fi
for b in "${builds[@]}"; do
    # shellcheck disable=SC2086  # (a build of several files: split on purpose)
    if "$PY" deploy/checks/policy.py $b; then echo "OK $b"; else fail "policy: $b"; fi
done

step "nats-server -t on each build's NATS configuration"
NATS_SERVER="$VENV/bin/nats-server"
if [ ${#KUSTOMIZE[@]} -eq 0 ]; then
    echo "WARN skipped: needs the overlays built"
elif [ ! -x "$NATS_SERVER" ]; then
    fail "$NATS_SERVER not found (install the project's embedded extra into $VENV)"
elif ! "$PY" deploy/checks/nats_config.py "$NATS_SERVER" "${rendered[@]}"; then
    fail "NATS configuration"
fi

echo
if [ $failures -ne 0 ]; then
    echo "validate: $failures check(s) FAILED" >&2
    exit 1
fi
echo "validate: all checks passed"
