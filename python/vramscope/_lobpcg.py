"""`torch.lobpcg` over values the twin does not carry.

LOBPCG's blocks take their widths from values (torch/_lobpcg.py, `LOBPCG._update_ortho`): the
search basis `S` holds X, then P, then W, the residuals' part B-orthogonal to the rest
(`_get_ortho`), whose columns `_get_svqb` keeps where `diag(U^T B U) != 0` (and, with
`ortho_use_drop`, where the Gram matrix's eigenvalues exceed a tolerance); `_get_ortho` repeats
its passes until `||U^T B U - I||` and `||V^T B U||` fall below `ortho_tol`, and eigenpairs drop
out of the iteration as their residuals fall below `tol` (`update_converged_count`). Over the
zeros that stand in for a large operand's values (docs/run.md "Values") every residual is zero:
`_get_svqb` drops every column, W is empty, and every product of the sparse or dense operator
with S runs at n columns where the GPU's run at 2n and 3n (blind285/jz05: 1.07 GB where the
H100 peaked at 1.45 GB).

So where the operands of one of those decisions carry no values the twin takes the branch any
operand of full rank takes, as PyTorch's own comment on it says ("`abs(d) == 0` is unlikely to be
True for random data"): no column of U is B-null and none is dropped, none of the Gram matrix's
eigenvalues lies under the tolerance, and the first orthogonalisation pass meets `ortho_tol` (a
float64 or float32 Gram matrix is the identity to rounding, 1e-15 and 1e-7 against the defaults'
sqrt(eps); blind285/jz05's 40 iterations, run on the host with its own values: 4e-15 to 8e-15 at
the first check of every iteration, i = j = 0). When pairs converge the twin cannot know; what
they change is the basis: once `nc` pairs have converged the next step's `S[:, nc:ns]` is a
strided slice (3n - 2 columns after one), which the sparse product copies contiguous beside its
result, its zeros and its column-major copy (`_sparse.py`'s `_addmm_core`), four blocks of that
width where the full basis' contiguous 3n columns took three. So the twin lets the pairs converge
one an iteration from the first step over the full basis on, which passes through those widths
(jz05 on the host: the first pair converged alone, at iteration 31 of 40; on the H100 its peak,
1,452,016,640 bytes, and reserved, 2,206,203,904, are the twin's with this rule to the byte, and
128,000,000 bytes (4 x 46 - 3 x 48 columns of 400,000 doubles) over the twin's with no pair
converged). Each tensor op of the originals runs as written, so their allocations are the GPU's;
only the reads that decide are answered so. Operands whose values the twin carries, and host
tensors, follow PyTorch's own code.
"""

from __future__ import annotations

import torch
import torch._lobpcg as _tl
from torch import _linalg_utils as _utils

from ._tensor import assumed, registered, set_value, value


def _unknown(*tensors) -> bool:
    """Whether any of `tensors` is a simulated tensor whose values the twin does not carry (or
    computed over stand-in zeros)."""
    return any(
        isinstance(t, torch.Tensor) and registered(t) and (value(t) is None or assumed(t)) for t in tensors
    )


def _all(mask, truth: bool):
    """`mask` read as `truth` at every element: the branch operands of full rank take."""
    set_value(mask, torch.full(tuple(mask.shape), truth, dtype=torch.bool))
    return mask


class LOBPCG(_tl.LOBPCG):
    """PyTorch's LOBPCG worker, its value-dependent branches taken as above where the values are
    unknown."""

    def update(self):
        if self.ivars["istep"] == 0 and _unknown(self.X):
            # `update`'s first step reads three norms as floats (`X_norm ** -1`: zero over stand-ins
            # raises); the reads allocate nothing, the products are the GPU's
            float(torch.norm(self.X))
            float(torch.norm(_utils.matmul(self.A, self.X)))
            float(torch.norm(_utils.matmul(self.B, self.X)))
            self.fvars.update(X_norm=1.0, A_norm=1.0, B_norm=1.0)
            self.ivars.update(iterations_left=self.iparams["niter"], converged_count=0)
            self.ivars["converged_end"] = 0
            if self.method == "ortho":
                self._update_ortho()
            else:
                self._update_basic()
            self.ivars["iterations_left"] -= 1
            self.ivars["istep"] += 1
            return
        super().update()

    def update_converged_count(self):
        E, X, R = self.E, self.X, self.R
        if not _unknown(E, X, R):
            return super().update_converged_count()
        A_norm, B_norm = self.fvars["A_norm"], self.fvars["B_norm"]
        rerr = torch.norm(R, 2, (0,)) / (
            torch.norm(X, 2, (0,)) * (A_norm + torch.abs(E[: X.shape[-1]]) * B_norm)
        )
        rerr < self.fparams["tol"]  # noqa: B015  (the comparison's kernel)
        self.tvars["rerr"] = rerr
        # pairs converge one at a time, the first at the first step over the full basis (X, P, W)
        count = self.ivars["converged_count"]
        if count or self.ivars["converged_end"] == 3 * self.iparams["n"]:
            count = min(count + 1, self.iparams["n"])
        self.ivars["converged_count"] = count
        return count

    def _get_svqb(self, U, drop: bool, tau: float):
        if torch.numel(U) == 0 or not _unknown(U):
            return super()._get_svqb(U, drop, tau)
        UBU = _utils.qform(self.B, U)
        d = UBU.diagonal(0, -2, -1)
        torch.where(_all(abs(d) != 0.0, True))  # no column is B-null
        d_col = (d**-0.5).reshape(d.shape[0], 1)
        DUBUD = (UBU * d_col) * d_col.mT
        E, Z = _utils.symeig(DUBUD)
        t = tau * abs(E).max()
        if drop:
            keep = torch.where(_all(E > t, True))  # none dropped
            E = E[keep[0]]
            Z = Z[:, keep[0]]
            d_col = d_col[keep[0]]
        else:
            E[(torch.where(_all(E < t, False)))[0]] = t  # none replaced
        return torch.matmul(U * d_col.mT, Z * E**-0.5)

    def _get_ortho(self, U, V):
        if not _unknown(U, V):
            return super()._get_ortho(U, V)
        mm = torch.matmul
        mm_B = _utils.matmul
        for vkey in list(self.fvars.keys()):
            if vkey.startswith("ortho_") and vkey.endswith("_rerr"):
                self.fvars.pop(vkey)
        BV_norm = torch.norm(mm_B(self.B, V))
        BU = mm_B(self.B, U)
        VBU = mm(V.mT, BU)
        # one outer and one inner pass, each meeting `ortho_tol` at its first check
        U = U - mm(V, VBU)
        if self.bparams["ortho_use_drop"]:
            U = self._get_svqb(U, False, self.fparams["ortho_tol_drop"])
        else:
            U = self._get_svqb(U, False, self.fparams["ortho_tol_replace"])
        self.ivars["ortho_i"] = self.ivars["ortho_j"] = 0
        if torch.numel(U) == 0:
            return U
        BU = mm_B(self.B, U)
        UBU = mm(U.mT, BU)
        U_norm = torch.norm(U)
        BU_norm = torch.norm(BU)
        R = UBU - torch.eye(UBU.shape[-1], device=UBU.device, dtype=UBU.dtype)
        R_norm = torch.norm(R)
        float(R_norm), float(BU_norm * U_norm)
        VBU = mm(V.mT, BU)
        VBU_norm = torch.norm(VBU)
        U_norm = torch.norm(U)
        float(VBU_norm), float(BV_norm * U_norm)
        return U


def install() -> None:
    """`torch.lobpcg` makes its worker by this name (`_lobpcg`: `LOBPCG(A, B, X, ...)`)."""
    _tl.LOBPCG = LOBPCG


install()
