"""o_runtime/handler_share.py: slow work past its share of handlers is deferred."""

from __future__ import annotations

import pytest

from o_runtime.commands import Deferred
from o_runtime.handler_share import HandlerShare


def test_work_past_the_share_is_deferred_and_a_handler_freed_takes_the_next() -> None:
    share = HandlerShare(2, delay=0.25)
    with share.taken(), share.taken():
        with pytest.raises(Deferred) as deferred, share.taken():
            pass
        assert deferred.value.delay == 0.25
        assert share.busy == 2
    assert share.busy == 0
    with pytest.raises(ValueError), share.taken():  # a failure frees its handler too
        raise ValueError("the model failed")
    assert share.busy == 0
