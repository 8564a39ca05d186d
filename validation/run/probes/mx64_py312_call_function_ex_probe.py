"""Session 64 (helper mx): when does CPython drop the caller's argument tuple of a starred call?

    python3 probes/mx64_py312_call_function_ex_probe.py      (from validation/run; no GPU, < 1 s)

blind279/jt02's phase 3 (a no_grad rollout `segment(*init_state(), weights, bias, 0, 256)`) peaked
3,145,728 bytes (its four state tensors) lower on the H100 than the twin, which runs the script under
CPython 3.11: there CALL_FUNCTION_EX keeps the call's argument tuple until the callee returns. CPython
3.12 (gh-98003, "Inline call frames for CALL_FUNCTION_EX", merged 2023-04-30) pushes a plain Python
function's frame from the tuple and releases it (`_PyEvalFramePushAndInit_Ex`), so the callee's
locals hold the only references. The twin's own run of the script with the tuple dropped by hand gives
the H100's figure. This prints, for each call form, whether an argument the callee rebinds is freed
inside the callee (True: the caller's tuple/dict no longer holds it).
"""

import functools
import sys
import weakref


class Obj:
    pass


def make():
    return Obj(), Obj()


def callee(a, b, *rest, **kw):
    r = weakref.ref(a)
    a = None
    return r() is None


class Holder:
    def meth(self, a, b, *rest, **kw):
        r = weakref.ref(a)
        a = None
        return r() is None


class CallableObj:
    def __call__(self, a, b, *rest, **kw):
        r = weakref.ref(a)
        a = None
        return r() is None


@functools.wraps(callee)
def wrapped(*args, **kwargs):
    return callee(*args, **kwargs)


def gen_args():
    return [Obj(), Obj()]


print(sys.version.split()[0])
print("f(*g())", callee(*make()))
print("f(*g(), x)", callee(*make(), 1))
print("f(*g(), k=1)", callee(*make(), k=1))
print("f(*g(), **{'k': 1})", callee(*make(), **{"k": 1}))
print("f(*list)", callee(*gen_args()))
print("obj.meth(*g())", Holder().meth(*make()))
print("callable_obj(*g())", CallableObj()(*make()))
print("wraps(*g())", wrapped(*make()))
print("partial(*g())", functools.partial(callee)(*make()))
