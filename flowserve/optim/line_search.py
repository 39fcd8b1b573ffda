"""The strong-Wolfe line search of ``LBFGS`` (PyTorch's, after minFunc): bracket a step that
lowers the loss enough (sufficient decrease, ``c1``) and flattens the slope (curvature,
``c2``), then zoom in by safeguarded cubic interpolation. Losses and slopes are Python floats;
``obj_func(x, t, d)`` returns the loss and flat gradient at ``x + t d``."""

from __future__ import annotations

import math


def cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None) -> float:
    """The minimiser of the cubic through (x1, f1, g1) and (x2, f2, g2), clamped to ``bounds``."""
    lo, hi = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square < 0:
        return (lo + hi) / 2.0
    d2 = math.sqrt(d2_square)
    if x1 <= x2:
        min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(min_pos, lo), hi)


def strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """``(loss, flat_grad, t, evaluations)`` at the step ``t`` found along ``d``."""
    d_norm = float(d.abs().max())
    f_new, g_new = obj_func(x, t, d)
    evals, gtd_new = 1, float(g_new.dot(d))
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    done, ls_iter = False, 0
    while ls_iter < max_ls:  # bracketing: grow t until an interval holds a good step
        if f_new > f + c1 * t * gtd or (ls_iter > 1 and f_new >= f_prev):
            bracket = [[t_prev, f_prev, g_prev, gtd_prev], [t, f_new, g_new, gtd_new]]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, done = [[t, f_new, g_new, gtd_new]], True
            break
        if gtd_new >= 0:
            bracket = [[t_prev, f_prev, g_prev, gtd_prev], [t, f_new, g_new, gtd_new]]
            break
        step = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(t + 0.01 * (t - t_prev), t * 10))
        t_prev, f_prev, g_prev, gtd_prev, t = t, f_new, g_new, gtd_new, step
        f_new, g_new = obj_func(x, t, d)
        evals, gtd_new, ls_iter = evals + 1, float(g_new.dot(d)), ls_iter + 1
    if ls_iter == max_ls:
        bracket = [[0.0, f, g, gtd], [t, f_new, g_new, gtd_new]]
    if done:
        return bracket[0][1], bracket[0][2], bracket[0][0], evals
    return _zoom(obj_func, x, d, f, gtd, bracket, d_norm, evals, ls_iter, c1, c2, tolerance_change, max_ls)


def _zoom(obj_func, x, d, f, gtd, bracket, d_norm, evals, ls_iter, c1, c2, tolerance_change, max_ls):
    """Shrink ``bracket`` ([t, loss, grad, slope] at each end) onto a strong-Wolfe step."""
    insuf_progress, done = False, False
    low, high = (0, 1) if bracket[0][1] <= bracket[-1][1] else (1, 0)
    while not done and ls_iter < max_ls:
        ts = [b[0] for b in bracket]
        if abs(ts[1] - ts[0]) * d_norm < tolerance_change:
            break
        t = cubic_interpolate(bracket[0][0], bracket[0][1], bracket[0][3], bracket[1][0], bracket[1][1],
                              bracket[1][3])
        t, insuf_progress = _safeguard(t, min(ts), max(ts), insuf_progress)
        f_new, g_new = obj_func(x, t, d)
        evals, gtd_new, ls_iter = evals + 1, float(g_new.dot(d)), ls_iter + 1
        if f_new > f + c1 * t * gtd or f_new >= bracket[low][1]:
            bracket[high] = [t, f_new, g_new, gtd_new]
            low, high = (0, 1) if bracket[0][1] <= bracket[1][1] else (1, 0)
            continue
        if abs(gtd_new) <= -c2 * gtd:
            done = True
        elif gtd_new * (bracket[high][0] - bracket[low][0]) >= 0:
            bracket[high] = list(bracket[low])
        bracket[low] = [t, f_new, g_new, gtd_new]
    t, f_new, g_new, _ = bracket[low]
    return f_new, g_new, t, evals


def _safeguard(t, lo, hi, insuf_progress):
    """Keep an interpolated step at least 10% of the bracket away from its ends (minFunc)."""
    eps = 0.1 * (hi - lo)
    if min(hi - t, t - lo) >= eps:
        return t, False
    if insuf_progress or t >= hi or t <= lo:
        return (hi - eps if abs(t - hi) < abs(t - lo) else lo + eps), False
    return t, True
