"""Policy check of rendered Kubernetes manifests (deploy/validate.sh runs it on each overlay).

No kube-linter or equivalent installs from PyPI, npm or Debian, so this is O's own, with the
rules kube-linter's defaults and the "restricted" Pod Security Standard care most about, plus
the ones a cluster of O needs to hold together:

- every container has CPU and memory requests and a memory limit;
- every container that listens (declares a port) has liveness and readiness probes;
- pods run as non-root with no service-account token, containers without privilege
  escalation, with all capabilities dropped and a read-only root filesystem;
- images carry a tag, never `latest`;
- a Deployment or StatefulSet with more than one replica, or scaled by an autoscaler, has a
  PodDisruptionBudget that selects it; one an autoscaler scales sets no `replicas` (every
  apply would reset the autoscaler's count); an autoscaler's target exists;
- the tool sandbox (users' code) has a NetworkPolicy that limits its egress;
- JetStream's stream replicas (O_STREAM_REPLICAS) fit the NATS servers, and reach 3 whenever
  there are 3 or more (R1 streams on a cluster would each live on one server).

    python deploy/checks/policy.py RENDERED.yaml [...]     # exit 1 and one line per problem
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

Doc = dict[str, Any]
WORKLOADS = ("Deployment", "StatefulSet", "Job", "CronJob", "DaemonSet")


def _name(doc: Doc) -> str:
    return f"{doc.get('kind')}/{(doc.get('metadata') or {}).get('name')}"


def _pod_spec(doc: Doc) -> Doc | None:
    spec = doc.get("spec") or {}
    if doc.get("kind") == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    template = spec.get("template")
    return (template or {}).get("spec") if isinstance(template, dict) else None


def _pod_labels(doc: Doc) -> dict[str, str]:
    template = (doc.get("spec") or {}).get("template") or {}
    return dict((template.get("metadata") or {}).get("labels") or {})


def _selects(selector: Doc | None, labels: dict[str, str]) -> bool:
    if not selector:
        return False
    wanted = selector.get("matchLabels") or {}
    if any(labels.get(k) != v for k, v in wanted.items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        value, op, values = labels.get(expr["key"]), expr["operator"], expr.get("values") or []
        if (
            (op == "In" and value not in values)
            or (op == "NotIn" and value in values)
            or (op == "Exists" and value is None)
            or (op == "DoesNotExist" and value is not None)
        ):
            return False
    return bool(wanted or selector.get("matchExpressions"))


def _containers(pod: Doc) -> Iterator[tuple[str, Doc]]:
    for key in ("initContainers", "containers"):
        for c in pod.get(key) or []:
            yield key, c


def check_pod(doc: Doc) -> Iterator[str]:
    pod = _pod_spec(doc)
    if pod is None:
        return
    what = _name(doc)
    if pod.get("automountServiceAccountToken") is not False:
        yield f"{what}: automountServiceAccountToken is not false"
    security = pod.get("securityContext") or {}
    if security.get("runAsNonRoot") is not True:
        yield f"{what}: the pod does not set runAsNonRoot: true"
    long_running = doc.get("kind") in ("Deployment", "StatefulSet", "DaemonSet")
    for key, c in _containers(pod):
        where = f"{what} {key[:-1]} {c.get('name')}"
        resources = c.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        for missing in ("cpu", "memory"):
            if missing not in requests:
                yield f"{where}: no {missing} request"
        if "memory" not in limits:
            yield f"{where}: no memory limit"
        image = str(c.get("image") or "")
        tag = image.rsplit("/", 1)[-1].partition(":")[2] if "@" not in image else "digest"
        if not tag or tag == "latest":
            yield f"{where}: image {image!r} is not pinned to a tag"
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            yield f"{where}: allowPrivilegeEscalation is not false"
        if sc.get("readOnlyRootFilesystem") is not True:
            yield f"{where}: the root filesystem is not read-only"
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            yield f"{where}: capabilities are not all dropped"
        if sc.get("privileged"):
            yield f"{where}: privileged"
        if long_running and key == "containers" and c.get("ports"):
            for probe in ("livenessProbe", "readinessProbe"):
                if probe not in c:
                    yield f"{where}: listens but has no {probe}"


def check_cluster(docs: list[Doc]) -> Iterator[str]:
    by_kind: dict[str, list[Doc]] = {}
    for d in docs:
        by_kind.setdefault(str(d.get("kind")), []).append(d)
    budgets = by_kind.get("PodDisruptionBudget", [])
    scalers = by_kind.get("HorizontalPodAutoscaler", [])
    workloads = {
        (d["kind"], d["metadata"]["name"]): d
        for d in by_kind.get("Deployment", []) + by_kind.get("StatefulSet", [])
    }
    scaled = set()
    for hpa in scalers:
        target = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        key = (target.get("kind"), target.get("name"))
        if key not in workloads:
            yield f"{_name(hpa)}: scales {key[0]}/{key[1]}, which is not deployed"
            continue
        scaled.add(key)
        if "replicas" in (workloads[key].get("spec") or {}):
            yield f"{key[0]}/{key[1]}: sets replicas although {_name(hpa)} scales it"
    for key, w in workloads.items():
        replicas = (w.get("spec") or {}).get("replicas", 1)
        if replicas <= 1 and key not in scaled:
            continue
        labels = _pod_labels(w)
        if not any(_selects((b.get("spec") or {}).get("selector"), labels) for b in budgets):
            count = "autoscaled" if key in scaled else f"{replicas} replicas"
            yield f"{key[0]}/{key[1]}: {count} but no PodDisruptionBudget"

    policies = by_kind.get("NetworkPolicy", [])
    sandboxes = [w for k, w in workloads.items() if k == ("Deployment", "tool-sandbox")]
    for sandbox in sandboxes:
        labels = _pod_labels(sandbox)
        if not any(
            "Egress" in ((p.get("spec") or {}).get("policyTypes") or [])
            and _selects((p.get("spec") or {}).get("podSelector"), labels)
            for p in policies
        ):
            yield "Deployment/tool-sandbox: no NetworkPolicy limits its egress"

    nats = workloads.get(("StatefulSet", "nats"))
    replicas = _stream_replicas(by_kind.get("ConfigMap", []))
    if nats is not None and replicas is not None:
        servers = (nats.get("spec") or {}).get("replicas", 1)
        if replicas > servers:
            yield f"O_STREAM_REPLICAS={replicas} but only {servers} NATS server(s)"
        if servers >= 3 and replicas < 3:
            yield f"O_STREAM_REPLICAS={replicas} on {servers} NATS servers: streams need 3"


def _stream_replicas(config_maps: Iterable[Doc]) -> int | None:
    for cm in config_maps:
        value = (cm.get("data") or {}).get("O_STREAM_REPLICAS")
        if value is not None:
            return int(value)
    return None


def check(docs: list[Doc]) -> list[str]:
    problems = [p for d in docs for p in check_pod(d)]
    return problems + list(check_cluster(docs))


def load(paths: Iterable[Path]) -> list[Doc]:
    docs: list[Doc] = []
    for path in paths:
        docs += [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    return docs


def main(argv: list[str]) -> int:
    problems = check(load(Path(a) for a in argv))
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
