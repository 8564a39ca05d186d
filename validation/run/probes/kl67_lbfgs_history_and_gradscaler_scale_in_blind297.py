"""Session 67, helper kl: what blind297's value-dependent parts did on the GPU.
Runs blind297/kl01 (Gatys LBFGS style transfer) with `torch.optim.LBFGS.step` wrapped to print, after each
step, the optimizer's iteration count, function evaluations, (s, y) history length and memory_allocated; then
blind297/kl04 (VE-SDE, fp16 GradScaler) with `GradScaler.update` wrapped to print the scale after each step
(a halved scale is a skipped `optimizer.step()`) and Adam's state count.
Run from validation/run: python3 probes/kl67_lbfgs_history_and_gradscaler_scale_in_blind297.py"""

import glob
import os
import runpy

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
_step = torch.optim.LBFGS.step


def step(self, closure):
    loss = _step(self, closure)
    st = self.state[self._params[0]]
    print(
        "lbfgs step: n_iter",
        st.get("n_iter"),
        "func_evals",
        st.get("func_evals"),
        "history",
        len(st.get("old_dirs", [])),
        "allocated",
        torch.cuda.memory_allocated(),
    )
    return loss


torch.optim.LBFGS.step = step
_update = torch.amp.GradScaler.update


def update(self, new_scale=None):
    _update(self, new_scale)
    print("gradscaler scale", self.get_scale())


torch.amp.GradScaler.update = update
for prefix in ("kl01", "kl04"):
    (path,) = glob.glob(os.path.join(HERE, "..", "blind297", prefix + "_*.py"))
    print("== " + prefix)
    runpy.run_path(path, run_name="__main__")
    torch.cuda.empty_cache()
