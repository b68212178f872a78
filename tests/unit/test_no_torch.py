"""The memory service, its local embedder loaded, imports no heavy ML runtime: issue 16 wants
every service under 150 MB and the same small package set on every machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "sentence_transformers", "transformers", "onnxruntime", "tensorflow", "jax")

PROGRAM = """
import json, sys
import o_memory.service
from o_memory.embeddings import local_embedder
local_embedder().embed_sync(["loaded"])
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def test_the_memory_service_with_its_embedder_loaded_imports_no_torch() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        env={"PYTHONPATH": f"{ROOT / 'contracts'}:{ROOT / 'services'}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    modules = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert "o_memory" in modules and "tokenizers" in modules
    assert not modules & set(HEAVY)
