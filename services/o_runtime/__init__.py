"""The runtime every O service runs on.

NKEY signing is offered to nats-py and FastStream before either is imported (nkey.py):
FastStream looks for the `nkeys` package once, when its NATS security module loads.
"""

from o_runtime import nkey as _nkey

_nkey.install()
