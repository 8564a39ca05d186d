"""What `vramscope run` does to start cheaper gives what Python gives: the frame that reserves
stack room (`_run._with_stack_room`)."""

from __future__ import annotations

import pytest
from vramscope import _run


def test_the_stack_room_frame_passes_calls_through():
    assert _run._with_stack_room.__code__.co_stacksize >= _run.STACK_ROOM

    def depth(n):
        return 0 if n == 0 else 1 + depth(n - 1)

    # frames below it: as deep as the recursion limit allows, as anywhere
    assert _run._with_stack_room(depth, 800) == 800
    with pytest.raises(ZeroDivisionError):
        _run._with_stack_room(lambda: 1 / 0)
