"""MetaOptNet's base learner: a differentiable multi-class (Crammer-Singer) SVM, in pure torch.

MetaOptNet (Lee et al., CVPR 2019) fits a Crammer-Singer SVM to the support features of
every episode by solving its dual QP (with ``qpth``, 3 interior-point iterations during
training) and scores queries with the SVM's class scores. With support features ``x_i``,
labels ``y_i`` and ``M`` classes, the dual (MetaOptNet's ``MetaOptNetHead_SVM_CS``, in
liblinear's notation) is::

    min_alpha  1/2 sum_m ||w_m||^2 - sum_i alpha_i^{y_i},   w_m = sum_i alpha_i^m x_i
    s.t.       alpha_i^m <= C [m = y_i]  and  sum_m alpha_i^m = 0   for every i, m

whose ``w`` is the primal solution of ``min 1/2 ||W||^2 + C sum_i max_m (1 - [m = y_i] +
w_m x_i - w_{y_i} x_i)``, the problem of sklearn's ``LinearSVC(multi_class="crammer_singer",
fit_intercept=False)`` (liblinear; no bias, as MetaOptNet). C = 0.1 as MetaOptNet.

Here the dual is solved without qpth: with ``beta_i = C e_{y_i} - alpha_i`` each sample's
feasible set is a scaled simplex (``beta_i >= 0``, ``sum beta_i = C``), so accelerated
projected gradient (FISTA with adaptive restart, step ``1 / lambda_max(K)``) converges to the
optimum; it runs in float64 without autograd until the largest change of an iteration is below
``tol * C``. Gradients come from implicit differentiation of the KKT conditions at that
solution with its active set held fixed (what qpth's backward pass does): the free dual
variables and the per-sample multipliers solve a linear system in the Gram matrix, whose
solution is differentiated by autograd. The forward value is the converged solution itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

SVM_C = 0.1
"""MetaOptNet's ``C_reg`` of the Crammer-Singer SVM head."""
SVM_TOL = 1e-9
SVM_MAX_ITER = 5000
RIDGE_EPS = 1e-9
"""Relative ridge on the KKT system of the backward pass (singular Gram matrices)."""


def _simplex(values: torch.Tensor, total: float) -> torch.Tensor:
    """Euclidean projection of each row onto ``{b >= 0, sum b = total}`` (sort-based)."""
    import torch

    ordered, _ = torch.sort(values, dim=1, descending=True)
    excess = ordered.cumsum(dim=1) - total
    ranks = torch.arange(1, values.shape[1] + 1, device=values.device, dtype=values.dtype)
    count = (ordered - excess / ranks > 0).sum(dim=1, keepdim=True)
    theta = excess.gather(1, count - 1) / count.to(values.dtype)
    return (values - theta).clamp_min(0.0)


def project_dual(alpha: torch.Tensor, hot: torch.Tensor, c: float) -> torch.Tensor:
    """Projection of ``[N, M]`` dual variables onto ``{alpha <= C hot, rows sum to 0}``."""
    return c * hot - _simplex(c * hot - alpha, c)


def solve_dual(
    gram: torch.Tensor,
    hot: torch.Tensor,
    c: float = SVM_C,
    tol: float = SVM_TOL,
    max_iter: int = SVM_MAX_ITER,
) -> tuple[torch.Tensor, int]:
    """The Crammer-Singer dual solution ``[N, M]`` by FISTA with restart (no autograd).

    Returns:
        The solution and the number of iterations run.
    """
    import torch

    with torch.no_grad():
        gram = gram.detach()
        step = 1.0 / float(torch.linalg.eigvalsh(gram)[-1].clamp_min(1e-12))
        alpha = torch.zeros_like(hot)
        moment = alpha
        t = 1.0
        iteration = 0
        for iteration in range(1, max_iter + 1):  # noqa: B007
            new = project_dual(moment - step * (gram @ moment - hot), hot, c)
            change = new - alpha
            t_next = (1.0 + (1.0 + 4.0 * t * t) ** 0.5) / 2.0
            if float(((moment - new) * change).sum()) > 0:  # restart (O'Donoghue & Candes)
                t_next, moment = 1.0, new
            else:
                moment = new + ((t - 1.0) / t_next) * change
            alpha, t = new, t_next
            if float(change.abs().max()) <= tol * c:
                break
        return alpha, iteration


def _kkt_alpha(
    gram: torch.Tensor, hot: torch.Tensor, solution: torch.Tensor, c: float
) -> torch.Tensor:
    """The dual solution as a differentiable function of ``gram``, active set held fixed."""
    import torch

    n, m = hot.shape
    bound = c * hot
    active = (bound - solution).reshape(-1) <= 1e-7 * c
    free = ~active
    fixed = (bound.reshape(-1) * active).to(gram.dtype)
    eye_m = torch.eye(m, dtype=gram.dtype, device=gram.device)
    hessian = torch.kron(gram, eye_m)  # [(i, m), (j, m')] = K_ij [m = m']
    sums = torch.kron(
        torch.eye(n, dtype=gram.dtype, device=gram.device), torch.ones(1, m).to(eye_m)
    )
    h_ff = hessian[free][:, free]
    a_f = sums[:, free]
    ridge = RIDGE_EPS * float(gram.diagonal().mean().detach().clamp_min(1e-12))
    h_ff = h_ff + ridge * torch.eye(len(h_ff), dtype=gram.dtype, device=gram.device)
    top = torch.cat([h_ff, a_f.T], dim=1)
    bottom = torch.cat([a_f, torch.zeros(n, n, dtype=gram.dtype, device=gram.device)], dim=1)
    rhs = torch.cat(
        [
            hot.reshape(-1)[free] - hessian[free][:, active] @ fixed[active],
            -(sums[:, active] @ fixed[active]),
        ]
    )
    free_values = torch.linalg.solve(torch.cat([top, bottom]), rhs)[: int(free.sum())]
    alpha = fixed.clone()
    alpha = alpha.masked_scatter(free, free_values)
    return alpha.reshape(n, m)


def svm_dual(
    support: torch.Tensor, labels: torch.Tensor, n_way: int, c: float = SVM_C
) -> torch.Tensor:
    """Crammer-Singer dual variables ``[N, n_way]`` of the support set, differentiable in it.

    Computed in float64 and returned in the support's dtype; the value is the FISTA solution,
    the gradient that of the KKT system at it (see the module docstring).
    """
    import torch.nn.functional as F

    features = support.double()
    gram = features @ features.T
    hot = F.one_hot(labels, n_way).to(gram.dtype)
    solution, _ = solve_dual(gram, hot, c)
    if not gram.requires_grad:
        return solution.to(support.dtype)
    implicit = _kkt_alpha(gram, hot, solution, c)
    return (solution + (implicit - implicit.detach())).to(support.dtype)


def svm_weights(
    support: torch.Tensor, labels: torch.Tensor, n_way: int, c: float = SVM_C
) -> torch.Tensor:
    """Primal SVM weights ``W = alpha^T X`` ``[n_way, D]`` (no bias, as MetaOptNet)."""
    return svm_dual(support, labels, n_way, c).T @ support


def svm_logits(
    support: torch.Tensor,
    labels: torch.Tensor,
    query: torch.Tensor,
    n_way: int,
    scale: torch.Tensor | float = 1.0,
    c: float = SVM_C,
) -> torch.Tensor:
    """MetaOptNet-SVM: ``scale * <w_m, q>`` of a Crammer-Singer SVM fit to the support set."""
    return scale * (query @ svm_weights(support, labels, n_way, c).T)
