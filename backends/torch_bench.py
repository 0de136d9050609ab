"""torch's own best calls (``torch.autograd``, ``torch.func``, dual tensors), what ``AutoTorch`` is benchmarked against.

The record is a leaf of its own: the adapter does not import it, and ``python -m diffinterface bench`` loads
it through the config's ``bench`` path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.autograd.forward_ad as fwAD

from diffinterface.extend import BenchEngine

if TYPE_CHECKING:
    from collections.abc import Callable


class Bench(BenchEngine):
    """``torch.autograd.grad`` (reverse), forward-mode dual tensors, ``torch.autograd.functional``'s
    vectorized ``hessian`` and ``jacobian``, on float64 tensors."""

    inputs = "torch float64"
    numpy_dtype = "float64"
    _LEAF = (
        "a leaf of x that requires grad, as the native call makes, and the result returned as it is (numpy x: "
        "torch.from_numpy and .numpy(), both zero-copy on the CPU): no pass over x beyond the native's"
    )
    costs = {
        "gradient": _LEAF,
        "hvp": _LEAF,
        "pullback": _LEAF,
        "pushforward": "f's primal and tangent (a dual tensor shares their memory, and f may write into its input, "
        "which writes into both and must not change the user's x or t): below 1e4 elements copies of x and t, from "
        "1e4 x itself as a detached alias that requires grad (torch refuses its writes before they reach t), which "
        "makes torch record a backward graph during the forward pass; at n = 10, the Python layers of the prep "
        "check and the dual-level lock",
    }

    def array(self, a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a))

    def rule_by_hand(self, primal: Callable[..., Any], vjp: Callable[..., Any]) -> Any:
        """A ``torch.autograd.Function`` moving tensors to NumPy, the input saved for backward."""

        class ByHand(torch.autograd.Function):
            @staticmethod
            def forward(a: torch.Tensor) -> Any:
                return torch.from_numpy(primal(a.detach().numpy()))

            @staticmethod
            def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
                ctx.save_for_backward(inputs[0])

            @staticmethod
            def backward(ctx: Any, *grad_outputs: torch.Tensor) -> Any:
                (a,), (dy,) = ctx.saved_tensors, grad_outputs
                return torch.from_numpy(np.ascontiguousarray(vjp(a.detach().numpy(), dy.detach().numpy())))

        return ByHand.apply

    def native(self, operator: str, f: Callable[..., Any], x: torch.Tensor, t: torch.Tensor, A: torch.Tensor) -> Any:
        def leaf() -> Any:
            return x.detach().requires_grad_()

        if operator == "gradient":

            def grad() -> Any:
                xt = leaf()
                return torch.autograd.grad(f(xt), xt)[0]

            return grad
        if operator == "hvp":

            def hvp() -> Any:
                xt = leaf()
                (g,) = torch.autograd.grad(f(xt), xt, create_graph=True)
                return torch.autograd.grad(g, xt, t)[0]

            return hvp
        if operator == "hessian":
            return lambda: torch.autograd.functional.hessian(f, x, vectorize=True)
        if operator == "pushforward":

            def jvp() -> Any:
                with fwAD.dual_level():
                    return fwAD.unpack_dual(f(fwAD.make_dual(x, t))).tangent

            return jvp
        if operator == "pullback":

            def vjp() -> Any:
                xt = leaf()
                return torch.autograd.grad(f(xt), xt, t)[0]

            return vjp
        if operator in ("jacobian tall", "jacobian wide"):
            strategy = "forward-mode" if operator.endswith("tall") else "reverse-mode"
            return lambda: torch.autograd.functional.jacobian(
                lambda z: torch.sin(A @ z), x, vectorize=True, strategy=strategy
            )
        return None
