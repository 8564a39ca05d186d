"""Facts the twin reads of an op once, kept on the op object itself.

An OpOverload's tags and schema do not change, nor does its entry in the twin's fixed tables (filled
as the modules are imported). A dict keyed by the op hashes it at each lookup through
`OpOverload.__hash__`, a Python method (`hash(self._op)`, torch/_ops.py): some 35 calls per op that
the 8B Llama step dispatched. A fact kept as an attribute of the op is read back without a call:

    try:
        return func._vramscope_pointwise
    except AttributeError:
        return kept(func, "_vramscope_pointwise", torch.Tag.pointwise in func.tags)
"""

from __future__ import annotations


def kept(func, name: str, value):
    """`value`, kept on op `func` as its attribute `name`, and returned. An object that takes no
    attribute keeps nothing (the fact is read again at the next call)."""
    try:
        setattr(func, name, value)
    except (AttributeError, TypeError):
        pass
    return value
