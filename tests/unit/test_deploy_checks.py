"""deploy/checks: the policy check and the custom resources' schemas catch what they claim to,
and k8s/base passes both (deploy/validate.sh runs them on every overlay's build)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from deploy.checks import crds, policy

ROOT = Path(__file__).resolve().parents[2]
BASE = sorted(p for p in (ROOT / "k8s" / "base").glob("*.yaml") if p.name != "kustomization.yaml")


def base_docs() -> list[dict[str, Any]]:
    return policy.load(BASE)


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def test_the_base_passes_the_policy_and_its_custom_resources_their_schemas() -> None:
    docs = base_docs()
    assert policy.check(docs) == []
    custom = [
        d for d in docs if d["apiVersion"].split("/")[0].endswith(("cnpg.io", "cert-manager.io"))
    ]
    assert sorted(d["kind"] for d in custom) == [
        "Certificate",
        "Certificate",
        "Cluster",
        "Issuer",
        "Issuer",
    ]
    assert list(crds.validate(custom)) == []


def test_a_container_without_requests_limits_or_a_read_only_root_is_reported() -> None:
    docs = base_docs()
    memory = find(docs, "Deployment", "memory")
    [container] = memory["spec"]["template"]["spec"]["containers"]
    del container["resources"]["limits"]["memory"]
    del container["resources"]["requests"]["cpu"]
    container["securityContext"]["readOnlyRootFilesystem"] = False
    container["image"] = "o-server:latest"
    assert sorted(policy.check(docs)) == [
        "Deployment/memory container memory: image 'o-server:latest' is not pinned to a tag",
        "Deployment/memory container memory: no cpu request",
        "Deployment/memory container memory: no memory limit",
        "Deployment/memory container memory: the root filesystem is not read-only",
    ]


def test_replicas_without_a_disruption_budget_or_beside_an_autoscaler_are_reported() -> None:
    docs = [
        d
        for d in base_docs()
        if (d["kind"], d["metadata"]["name"]) != ("PodDisruptionBudget", "memory")
    ]
    find(docs, "Deployment", "executor")["spec"]["replicas"] = 2
    assert sorted(policy.check(docs)) == [
        "Deployment/executor: sets replicas although HorizontalPodAutoscaler/executor scales it",
        "Deployment/memory: 2 replicas but no PodDisruptionBudget",
    ]


def test_single_replica_streams_on_a_nats_cluster_are_reported() -> None:
    docs = base_docs()
    find(docs, "ConfigMap", "o-config")["data"]["O_STREAM_REPLICAS"] = "1"
    assert policy.check(docs) == ["O_STREAM_REPLICAS=1 on 3 NATS servers: streams need 3"]


def test_a_sandbox_whose_egress_is_open_is_reported() -> None:
    docs = [
        d
        for d in base_docs()
        if (d["kind"], d["metadata"]["name"]) != ("NetworkPolicy", "tool-sandbox")
    ]
    assert policy.check(docs) == ["Deployment/tool-sandbox: no NetworkPolicy limits its egress"]


def test_a_misspelt_or_invalid_field_of_a_custom_resource_is_refused() -> None:
    cluster = copy.deepcopy(find(base_docs(), "Cluster", "o-pg"))
    cluster["spec"]["affinity"]["podAntiAffinityTyp"] = cluster["spec"]["affinity"].pop(
        "podAntiAffinityType"
    )
    cluster["spec"]["instances"] = "three"
    problems = list(crds.validate([cluster]))
    assert problems == [
        "Cluster/o-pg: spec/affinity: Additional properties are not allowed "
        "('podAntiAffinityTyp' was unexpected)",
        "Cluster/o-pg: spec/instances: 'three' is not of type 'integer'",
    ]


def test_a_kind_without_a_bundled_schema_is_refused() -> None:
    doc = yaml.safe_load("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n")
    assert list(crds.validate([doc])) == [
        "Widget/w: no bundled schema for example.com/v1 Widget (example.com_widget_v1.json)"
    ]
