"""Every collection CPython's cyclic collector runs in a script, in order, with the CUDA memory it frees.

    python3 gc_sequence_probe_s63.py SCRIPT [ARGS...]          (on the GPU)
    vramscope run --gpu h100 gc_sequence_probe_s63.py SCRIPT   (the twin's process, the same lines)

Like gc_timeline_probe_s62.py, but one line for every collection (`c <phase> g<generation> n<collected>
f<freed bytes>`, freed from `torch.cuda.memory_allocated()` at its start and stop), and the counts
(`gc.get_count()`) and collections per generation so far at each of the script's own prints (its
`print` is wrapped through runpy's init_globals) and at each `torch.cuda.reset_peak_memory_stats()`
(the phase boundary), and around each `torch.func.linearize`/`torch.func.vjp` call (blind272/jm01's
steps). Written for session 63 (helper gc): where in each step the collections fall, on the GPU's
CPython 3.12 against the twin's process. The callback allocates nothing on the device.
"""

import builtins
import gc
import runpy
import sys

import torch
import torch.func

_at_start = [0]
_phase = [0]


def _state():
    return f"count {gc.get_count()} collections {[s['collections'] for s in gc.get_stats()]}"


def _cb(phase, info):
    if not torch.cuda.is_initialized():
        if phase == "stop":
            print(f"c p{_phase[0]} g{info['generation']} n{info['collected']} f-", flush=True)
        return
    now = torch.cuda.memory_allocated()
    if phase == "start":
        _at_start[0] = now
        return
    print(f"c p{_phase[0]} g{info['generation']} n{info['collected']} f{_at_start[0] - now}", flush=True)


def _boundary(original):
    def reset_peak_memory_stats(*args, **kwargs):
        print(f"boundary phase{_phase[0]} {_state()}", flush=True)
        _phase[0] += 1
        return original(*args, **kwargs)

    return reset_peak_memory_stats


def _marked(name, original):
    def call(*args, **kwargs):
        print(f"enter {name} {_state()}", flush=True)
        out = original(*args, **kwargs)
        print(f"leave {name} {_state()}", flush=True)
        return out

    return call


_print = builtins.print


def _script_print(*args, **kwargs):
    _print(*args, **kwargs)
    _print(f"  at print: {_state()}", flush=True)


_print("gc thresholds", gc.get_threshold(), "python", sys.version.split()[0], "torch", torch.__version__)
_print(f"start {_state()}", flush=True)
gc.callbacks.append(_cb)
torch.cuda.reset_peak_memory_stats = _boundary(torch.cuda.reset_peak_memory_stats)
torch.func.linearize = _marked("linearize", torch.func.linearize)
torch.func.vjp = _marked("vjp", torch.func.vjp)
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], init_globals={"print": _script_print}, run_name="__main__")
finally:
    gc.callbacks.remove(_cb)
    _print(f"end {_state()}", flush=True)
