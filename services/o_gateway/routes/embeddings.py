"""`GET /v1/embeddings/total_storage_size`: what the archival passages' embeddings take.

Letta estimates it from the count of passages at its padded width (4,096 dimensions of
4 bytes each); O sums what is stored: each passage's own dimensions, 4 bytes each
(pgvector's float4). Folders' file chunks are not counted, as Letta does not count them.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, HTTPException

from o_gateway.routes.paths import route
from o_gateway.state import GW

router = APIRouter()

BYTES_PER_UNIT = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}
BYTES_PER_DIMENSION = 4


@route(router, "GET", "/v1/embeddings/total_storage_size")
async def get_embeddings_total_storage_size(
    gw: GW, storage_unit: Annotated[str, Header(alias="storage_unit")] = "GB"
) -> float:
    if storage_unit not in BYTES_PER_UNIT:
        raise HTTPException(
            400,
            f"Invalid storage unit: {storage_unit}. Must be one of {list(BYTES_PER_UNIT)}.",
        )
    dimensions: int = await gw.pool.fetchval(
        "SELECT coalesce(sum(vector_dims(embedding)), 0) FROM passages"
    )
    return dimensions * BYTES_PER_DIMENSION / BYTES_PER_UNIT[storage_unit]
