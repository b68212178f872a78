"""Offline validation of the custom resources in k8s/ (CloudNativePG's Cluster, cert-manager's
Certificate and Issuer) against their operators' own schemas, bundled in deploy/schemas/.

kubernetes-validate knows only Kubernetes' built-in kinds (a custom one is a warning), so
deploy/validate.sh hands the custom ones here. The schemas are the `openAPIV3Schema` of each
CRD as its project publishes it (deploy/schemas/README.md says which version), without
descriptions, and made strict: an object that lists its properties accepts no others unless
the CRD says it keeps unknown fields. The API server would silently prune an unknown field
(a typo such as `podAntiAffinityTyp`); here it is an error.

    python deploy/checks/crds.py validate RENDERED.yaml [...]
    python deploy/checks/crds.py extract CRD.yaml [...]     # refresh deploy/schemas/
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import yaml

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
PRESERVE = "x-kubernetes-preserve-unknown-fields"


def schema_file(api_version: str, kind: str) -> Path:
    group, _, version = api_version.rpartition("/")
    return SCHEMAS / f"{group}_{kind}_{version}.json".lower()


def strict(node: Any) -> Any:
    """The schema without descriptions, closed where it lists properties."""
    if isinstance(node, list):
        return [strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items() if k != "description"}
    if "properties" in out and "additionalProperties" not in out and not out.get(PRESERVE):
        out["additionalProperties"] = False
    return out


def extract(crd_files: Iterable[Path]) -> list[Path]:
    written = []
    for path in crd_files:
        for crd in yaml.safe_load_all(path.read_text()):
            if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                schema = strict(version["schema"]["openAPIV3Schema"])
                # apiVersion, kind and metadata are the API server's: any well-formed value.
                schema.setdefault("properties", {})["metadata"] = {"type": "object"}
                out = schema_file(f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                out.write_text(json.dumps(schema, separators=(",", ":"), sort_keys=True) + "\n")
                written.append(out)
    return written


def validate(docs: Iterable[dict[str, Any]]) -> Iterator[str]:
    for doc in docs:
        api_version, kind = str(doc.get("apiVersion")), str(doc.get("kind"))
        path = schema_file(api_version, kind)
        name = f"{kind}/{(doc.get('metadata') or {}).get('name')}"
        if not path.is_file():
            yield f"{name}: no bundled schema for {api_version} {kind} ({path.name})"
            continue
        validator = jsonschema.Draft7Validator(json.loads(path.read_text()))
        for error in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
            where = "/".join(str(p) for p in error.absolute_path) or "(top)"
            yield f"{name}: {where}: {error.message}"


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("validate", "extract"):
        print(__doc__)
        return 2
    paths = [Path(a) for a in argv[1:]]
    if argv[0] == "extract":
        for out in extract(paths):
            print(f"wrote {out}")
        return 0
    docs = [d for p in paths for d in yaml.safe_load_all(p.read_text()) if isinstance(d, dict)]
    problems = list(validate(docs))
    for problem in problems:
        print(problem)
    print(f"{len(docs)} custom resources checked" if not problems else "", end="")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
