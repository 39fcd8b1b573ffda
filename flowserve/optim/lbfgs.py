"""L-BFGS (``torch.optim.LBFGS``): a closure-based quasi-Newton optimizer, PyTorch's algorithm
and defaults (after minFunc), with its optional strong-Wolfe line search.

It re-evaluates the model several times per ``step(closure)``, so it runs eagerly only:
``nn.Graph.add_optimizer`` refuses it. Vectors are flowserve tensors (the parameters joined
into one flat vector); the scalars of the recursion (curvatures, step sizes) are Python floats.

>>> import flowserve as flow
>>> w = flow.nn.Parameter(flow.tensor([3.0, -2.0]))
>>> opt = flow.optim.LBFGS([w], line_search_fn="strong_wolfe")
>>> def closure():
...     opt.zero_grad()
...     loss = ((w - 1.0) ** 2).sum()
...     loss.backward()
...     return loss
>>> _ = opt.step(closure)
>>> [round(v, 4) for v in w.tolist()]
[1.0, 1.0]
"""

from __future__ import annotations

from flowserve.autograd.grad_mode import enable_grad, no_grad
from flowserve.errors import FlowserveError
from flowserve.ops import core_functions
from flowserve.ops import creation
from flowserve.optim.line_search import strong_wolfe
from flowserve.optim.optimizer import Optimizer


class LBFGS(Optimizer):
    """``LBFGS(params, lr=1, max_iter=20, max_eval=None, tolerance_grad=1e-7,
    tolerance_change=1e-9, history_size=100, line_search_fn=None)``; one parameter group."""

    def __init__(self, params, lr: float = 1, max_iter: int = 20, max_eval=None, tolerance_grad: float = 1e-7,
                 tolerance_change: float = 1e-9, history_size: int = 100, line_search_fn=None):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if line_search_fn not in (None, "strong_wolfe"):
            raise ValueError(f"LBFGS: line_search_fn must be None or 'strong_wolfe', got {line_search_fn!r}")
        max_eval = max_iter * 5 // 4 if max_eval is None else max_eval
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval, tolerance_grad=tolerance_grad,
                                      tolerance_change=tolerance_change, history_size=history_size,
                                      line_search_fn=line_search_fn))
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    def _update(self, p, g, state, group, lr) -> None:
        raise FlowserveError("LBFGS re-evaluates the model inside step(closure) and runs eagerly only: "
                             "call opt.step(closure) outside nn.Graph, or give the graph SGD/Adam")

    # -- the flat parameter vector -------------------------------------------------------------

    def _flat_grad(self):
        """The gradients joined into one new vector (zeros where a parameter has none)."""
        return core_functions.clone(core_functions.cat([(p.grad if p.grad is not None else creation.zeros_like(p)).reshape(-1)
                                      for p in self._params], 0))

    def _add_grad(self, step_size: float, update) -> None:
        offset = 0
        for p in self._params:
            n = p.numel()
            p.copy_(p + update[offset: offset + n].reshape(p.shape) * step_size)
            offset += n

    def _directional_evaluate(self, closure, x, t: float, d):
        self._add_grad(t, d)
        loss = float(closure())
        flat_grad = self._flat_grad()
        for p, saved in zip(self._params, x):
            p.copy_(saved)
        return loss, flat_grad

    # -- the two-loop recursion ----------------------------------------------------------------

    def _direction(self, state: dict, flat_grad, history_size: int):
        """The quasi-Newton direction ``-H g`` from the last ``history_size`` curvature pairs."""
        if state["n_iter"] == 1:
            state.update(old_dirs=[], old_stps=[], ro=[], H_diag=1.0)
            return -flat_grad
        y = flat_grad - state["prev_flat_grad"]
        s = state["d"] * state["t"]
        ys = float(y.dot(s))
        if ys > 1e-10:  # keep the pair only where the curvature condition holds
            if len(state["old_dirs"]) == history_size:
                for key in ("old_dirs", "old_stps", "ro"):
                    state[key].pop(0)
            state["old_dirs"].append(y)
            state["old_stps"].append(s)
            state["ro"].append(1.0 / ys)
            state["H_diag"] = ys / float(y.dot(y))
        dirs, stps, ro = state["old_dirs"], state["old_stps"], state["ro"]
        q, al = -flat_grad, [0.0] * len(dirs)
        for i in range(len(dirs) - 1, -1, -1):
            al[i] = float(stps[i].dot(q)) * ro[i]
            q = q - dirs[i] * al[i]
        r = q * state["H_diag"]
        for i in range(len(dirs)):
            be_i = float(dirs[i].dot(r)) * ro[i]
            r = r + stps[i] * (al[i] - be_i)
        return r

    # -- step ----------------------------------------------------------------------------------

    @no_grad()
    def step(self, closure):
        """Up to ``max_iter`` L-BFGS iterations; returns the loss of the first ``closure()`` call."""
        if closure is None:
            raise FlowserveError("LBFGS.step needs a closure that clears the gradients, computes the loss, "
                                 "calls backward() and returns the loss")
        closure = enable_grad()(closure)
        group = self.param_groups[0]
        state = self.state.setdefault(self._params[0], {})
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        orig_loss = closure()
        loss = float(orig_loss)
        state["func_evals"] += 1
        flat_grad = self._flat_grad()
        if float(flat_grad.abs().max()) <= group["tolerance_grad"]:
            return orig_loss
        current_evals, n_iter = 1, 0
        while n_iter < group["max_iter"]:
            n_iter += 1
            state["n_iter"] += 1
            d = state["d"] = self._direction(state, flat_grad, group["history_size"])
            state["prev_flat_grad"], state["prev_loss"] = flat_grad, loss
            t = min(1.0, 1.0 / float(flat_grad.abs().sum())) * group["lr"] if state["n_iter"] == 1 else group["lr"]
            state["t"] = t
            gtd = float(flat_grad.dot(d))
            if gtd > -group["tolerance_change"]:
                break
            loss, flat_grad, t, evals = self._move(closure, group, t, d, loss, flat_grad, gtd, current_evals,
                                                   last=n_iter == group["max_iter"])
            state["t"] = t
            current_evals += evals
            state["func_evals"] += evals
            if self._converged(group, n_iter, current_evals, flat_grad, d, t, loss, state["prev_loss"]):
                break
        return orig_loss

    def _move(self, closure, group, t, d, loss, flat_grad, gtd, current_evals, last: bool):
        """Step along ``d`` (by ``t``, or where the line search lands); the new loss and gradient."""
        if group["line_search_fn"] == "strong_wolfe":
            x_init = [p.clone() for p in self._params]
            loss, flat_grad, t, evals = strong_wolfe(
                lambda x, step, direction: self._directional_evaluate(closure, x, step, direction),
                x_init, t, d, loss, flat_grad, gtd, max_ls=group["max_eval"] - current_evals)
            self._add_grad(t, d)
            return loss, flat_grad, t, evals
        self._add_grad(t, d)
        if last:  # PyTorch re-evaluates only where another iteration may follow
            return loss, flat_grad, t, 0
        with enable_grad():
            loss = float(closure())
        return loss, self._flat_grad(), t, 1

    @staticmethod
    def _converged(group, n_iter, current_evals, flat_grad, d, t, loss, prev_loss) -> bool:
        return (n_iter == group["max_iter"] or current_evals >= group["max_eval"]
                or float(flat_grad.abs().max()) <= group["tolerance_grad"]
                or float((d * t).abs().max()) <= group["tolerance_change"]
                or abs(loss - prev_loss) < group["tolerance_change"])
