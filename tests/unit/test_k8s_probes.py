"""Kubernetes' probes in k8s/ ask what each service answers: liveness for the startup and
liveness probes, readiness for the readiness probe (docs/observability.md#health), on the
port that serves them, which Prometheus' scrape annotations name too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("gateway", "executor", "memory", "tool-sandbox", "evolution")
# (liveness, readiness) paths by service.
PATHS = {"gateway": ("/v1/health/live", "/v1/health/ready")}
HEALTH_SERVER = ("/healthz", "/readyz")


def container(service: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The service's Deployment's pod template and its one container."""
    documents = yaml.safe_load_all((ROOT / "k8s" / "base" / f"{service}.yaml").read_text())
    deployment = next(d for d in documents if d and d["kind"] == "Deployment")
    template = deployment["spec"]["template"]
    [only] = template["spec"]["containers"]
    return template, only


def test_every_probe_asks_its_services_liveness_or_readiness() -> None:
    for service in SERVICES:
        _, spec = container(service)
        live, ready = PATHS.get(service, HEALTH_SERVER)
        assert spec["startupProbe"]["httpGet"]["path"] == live, service
        assert spec["livenessProbe"]["httpGet"]["path"] == live, service
        assert spec["readinessProbe"]["httpGet"]["path"] == ready, service


def test_probes_and_scrapes_use_the_port_that_serves_them() -> None:
    for service in SERVICES:
        template, spec = container(service)
        ports = {p["name"]: p["containerPort"] for p in spec["ports"]}
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert spec[probe]["httpGet"]["port"] in ports, (service, probe)
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/path"] == "/metrics"
        assert int(annotations["prometheus.io/port"]) in ports.values(), service
