"""The service-kept key-value buckets' shape, and opening one (o_held, o_refused)."""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KeyValue


def kept_bucket(bucket: str, ttl: float, replicas: int = 1) -> KeyValueConfig:
    """One value a key, on disk, read with direct gets; each key gone `ttl` after its last
    write."""
    return KeyValueConfig(
        bucket=bucket,
        history=1,
        ttl=ttl,
        direct=True,
        storage=StorageType.FILE,
        replicas=replicas,
    )


async def opened(js: JetStreamContext, config: KeyValueConfig) -> KeyValue:
    """The bucket (made by the setup role: o_setup/topology.py; here only for identities
    that may, such as tests' operator)."""
    assert config.bucket is not None
    try:
        return await js.key_value(config.bucket)
    except BucketNotFoundError:
        return await js.create_key_value(config)
