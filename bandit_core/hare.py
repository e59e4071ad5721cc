"""HARE: uncertainty-augmented attention over item clusters (docs/algorithms.md section 4).

Inputs through the common API: each row of ``X`` (shape ``(K, d)``) is
``concat(x, v_i)``, the user context ``x`` (the first ``context_dim`` columns, the same in
every row) followed by item ``i``'s embedding ``v_i`` (``d_item = d - context_dim``).
Per head ``h`` (docs/algorithms.md sections 4.1, 4.3 and 4.4)::

    q   = W_Qx x + W_Qu u_hat + b_Q                (d_k)
    k_i = W_K v_i,  s_i = q . k_i / sqrt(d_k)
    U_j = sqrt(q^T Sigma_j^-1 q),  Sigma_j = lambda*I + sum q_t q_t^T   (rounds served from cluster j)
    A   = softmax_i(s_i + alpha * U_{c(i)})         (averaged over heads)
    z   = concat_h(sum_i A_i W_V v_i) W_O

Decision (docs/algorithms.md section 4.2): cluster
``j* = argmax_j [mean_{i in j} s_i + alpha * U_j]`` (averaged over heads), then the
candidate of highest attention inside ``j*``. ``Decision.scores`` are the attention
weights ``A_i`` (so the ranking is by attention), ``Decision.widths`` the cluster
bonus ``U_{c(i)}`` (head-averaged, without alpha), and ``Decision.extras`` holds
``attention`` and ``attention_heads`` (aligned with the ranking), the candidates'
``clusters``, the chosen ``cluster`` and the attended representation ``z``.

The user state ``u_hat`` is a Bayesian linear model per user id over the chosen items'
embeddings, ``P_u = I + sum v v^T / sigma^2``, ``u_hat = P_u^-1 sum r v / sigma^2``
(a :class:`~bandit_core.linear.LinearArmState` fed ``v / sigma`` and ``r / sigma``);
an unknown or absent user has the prior mean 0. After each reward one clipped SGD step
on ``(r - s)^2`` (or the logistic loss, ``loss="logistic"``) moves ``W_Qx, W_Qu, b_Q,
W_K``, where ``s`` is the head-averaged ``s_chosen``; ``W_V, W_O`` stay at their random
initialisation (they only shape ``z`` for a downstream generator).

>>> import numpy as np
>>> p = HARE(HAREConfig(d=3, key_dim=2, n_clusters=2, seed=0))
>>> X = np.array([[1.0, 0.0, 0.0], [0.9, 0.1, 0.0], [0.0, 0.0, 1.0]])
>>> dec = p.select(["a", "b", "c"], X)
>>> round(float(dec.scores.sum()), 12), dec.extras["z"].shape
(1.0, (3,))
>>> p.update(dec.arm_id, X[["a", "b", "c"].index(dec.arm_id)], 1.0)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike

from bandit_core.errors import ConfigError, InvalidInputError
from bandit_core.kmeans import kmeans, nearest
from bandit_core.linear import LinearArmState, cholesky_inverse, sherman_morrison
from bandit_core.policy import (
    ARM_PREFIX,
    SHARED_PART,
    BasePolicy,
    Decision,
    PolicyConfig,
    SelectContext,
)
from bandit_core.state import ArrayState
from bandit_core.validation import (
    check_choice,
    check_int,
    check_matrix,
    check_real,
    check_reward,
    check_true,
)

LOSSES = ("squared", "logistic")
#: The projections the SGD step and :meth:`HARE.fit_projections` learn.
LEARNED = ("W_Qx", "W_Qu", "b_Q", "W_K")


@dataclass(frozen=True)
class HAREConfig(PolicyConfig):
    """HARE hyperparameters (docs/algorithms.md section 4).

    ``context_dim``: leading columns of each row that are the user context ``x``
    (``d_x``; 0 = no context). ``heads``: H. ``key_dim``: d_k. ``value_dim``: d_v per
    head. ``out_dim``: length of ``z`` (default ``d_item``). ``n_clusters``: C.
    ``clusters``: optional mapping arm id -> cluster in ``[0, n_clusters)`` (stored as
    sorted ``(id, cluster)`` pairs); without it clusters come from seeded k-means over
    the embeddings of the arms seen at the first selection, later arms join the nearest
    centroid. ``ridge_lambda``: the prior ``Sigma_j = lambda*I``. ``refactor_every``:
    Sherman-Morrison steps between Cholesky re-derivations. ``sigma``: reward noise of
    the user model. ``learning_rate``, ``l2`` (on the matrices, not ``b_Q``),
    ``grad_clip`` (global L2 norm of the gradient; ``inf`` = none) and ``loss``
    (``"squared"`` or ``"logistic"``, the latter for rewards in [0, 1]) drive the SGD.
    """

    context_dim: int = 0
    heads: int = 1
    key_dim: int = 8
    value_dim: int = 8
    out_dim: int | None = None
    n_clusters: int = 4
    clusters: Mapping[str, int] | tuple[tuple[str, int], ...] | None = None
    ridge_lambda: float = 1.0
    refactor_every: int = 1000
    sigma: float = 1.0
    learning_rate: float = 0.1
    l2: float = 1e-4
    grad_clip: float = 1.0
    loss: str = "squared"

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("heads", "key_dim", "value_dim", "n_clusters", "refactor_every"):
            object.__setattr__(self, name, check_int(getattr(self, name), name, low=1))
        # the item embedding needs a column: context_dim < d
        object.__setattr__(
            self, "context_dim", check_int(self.context_dim, "context_dim", low=0, high=self.d - 1)
        )
        object.__setattr__(
            self, "out_dim", check_int(self.out_dim, "out_dim", low=1, allow_none=True)
        )
        for name in ("ridge_lambda", "sigma", "learning_rate"):
            object.__setattr__(
                self, name, check_real(getattr(self, name), name, low=0.0, low_open=True)
            )
        object.__setattr__(
            self,
            "grad_clip",
            check_real(self.grad_clip, "grad_clip", low=0.0, low_open=True, allow_inf=True),
        )
        object.__setattr__(self, "l2", check_real(self.l2, "l2", low=0.0))
        check_choice(self.loss, "loss", LOSSES)
        check_true(
            self.loss != "logistic"
            or (0.0 <= self.reward_range[0] and self.reward_range[1] <= 1.0),
            f"loss 'logistic' needs reward_range inside [0, 1], but got {self.reward_range}",
        )
        if self.clusters is not None:
            object.__setattr__(self, "clusters", self._check_clusters(self.clusters))

    def _check_clusters(self, clusters: Any) -> tuple[tuple[str, int], ...]:
        pairs = clusters.items() if isinstance(clusters, Mapping) else clusters
        try:
            out = tuple(sorted((str(a), c) for a, c in pairs))
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"clusters must map arm id -> cluster index, but got {clusters!r}"
            ) from exc
        return tuple(
            (a, check_int(c, f"clusters[{a!r}]", low=0, high=self.n_clusters - 1)) for a, c in out
        )

    @property
    def d_item(self) -> int:
        """Length of the item embedding, ``d - context_dim``."""
        return self.d - self.context_dim

    @property
    def cluster_map(self) -> dict[str, int]:
        """``clusters`` as a dict (empty when clusters come from k-means)."""
        return dict(self.clusters or ())


@dataclass
class HAREArmState(ArrayState):
    """One item: rewards applied ``n``, their sum, and its ``cluster`` (-1 = not yet assigned)."""

    KIND: ClassVar[str] = "hare_arm"
    n: int = 0
    reward_sum: float = 0.0
    cluster: int = -1


@dataclass
class HARESharedState(ArrayState):
    """Parameters shared by every item and user (the ``shared`` state part).

    Shapes: ``W_Qx (H, d_k, d_x)``, ``W_Qu (H, d_k, d_item)``, ``b_Q (H, d_k)``,
    ``W_K (H, d_k, d_item)``, ``W_V (H, d_v, d_item)``, ``W_O (H*d_v, d_out)``,
    ``Sigma, Sigma_inv (H, C, d_k, d_k)``, ``cluster_n, since_refactor (C,)``,
    ``centroids (C, d_item)`` of which the first ``n_centroids`` are set.
    """

    KIND: ClassVar[str] = "hare_shared"
    W_Qx: np.ndarray
    W_Qu: np.ndarray
    b_Q: np.ndarray
    W_K: np.ndarray
    W_V: np.ndarray
    W_O: np.ndarray
    Sigma: np.ndarray
    Sigma_inv: np.ndarray
    cluster_n: np.ndarray
    since_refactor: np.ndarray
    centroids: np.ndarray
    n_centroids: int = 0
    n_updates: int = 0


def queries(sh: HARESharedState, Xc: np.ndarray, U: np.ndarray) -> np.ndarray:
    """``q = W_Qx x + W_Qu u_hat + b_Q`` per head for B rows: ``Xc (B, d_x)``,
    ``U (B, d_item)`` -> ``(B, H, d_k)``.

    Without a context (``d_x = 0``) the ``W_Qx x`` term is left out rather than
    contracted over the empty axis (numpy 2.4 returned non-finite garbage for that
    contraction about once in five service runs); ``0 + y`` is ``y``, so the result is the same.
    """
    q = np.einsum("hkd,bd->bhk", sh.W_Qu, U)
    if Xc.shape[1]:
        q = np.einsum("hkd,bd->bhk", sh.W_Qx, Xc) + q
    result: np.ndarray = q + sh.b_Q
    return result


def projection_gradients(
    sh: HARESharedState,
    Xc: np.ndarray,
    U: np.ndarray,
    V: np.ndarray,
    r: np.ndarray,
    loss: str,
    l2: float,
) -> tuple[dict[str, np.ndarray], float, np.ndarray]:
    """Gradient of the mean loss over B events w.r.t. :data:`LEARNED` projections.

    Objective: ``mean_b loss(r_b, s_b) + l2/2 * (|W_Qx|^2 + |W_Qu|^2 + |W_K|^2)`` with
    ``s_b = mean_h q_bh . k_bh / sqrt(d_k)`` (the served item's head-averaged score) and
    ``loss = (r - s)^2`` or the logistic loss ``-r log sigma(s) - (1-r) log(1-sigma(s))``.
    The gradients are outer products, e.g. ``ds/dW_Qx^h = k^h x^T / (H sqrt(d_k))``.
    Shapes: ``Xc (B, d_x)``, ``U, V (B, d_item)``, ``r (B,)``. Returns
    ``(gradients by name, objective, q (B, H, d_k))``.
    """
    H, d_k = sh.b_Q.shape
    q = queries(sh, Xc, U)
    k = np.einsum("hkd,bd->bhk", sh.W_K, V)
    s = (q * k).sum(-1).mean(1) / math.sqrt(d_k)
    if loss == "squared":
        data_loss = np.mean((r - s) ** 2)
        g = 2.0 * (s - r)
    else:
        data_loss = np.mean(np.logaddexp(0.0, s) - r * s)
        g = 0.5 * (1.0 + np.tanh(0.5 * s)) - r  # sigmoid(s) - r, without overflow
    g = g / (len(r) * H * math.sqrt(d_k))
    gq = g[:, None, None] * k
    gk = g[:, None, None] * q
    grads = {
        "W_Qx": np.einsum("bhk,bd->hkd", gq, Xc) + l2 * sh.W_Qx,
        "W_Qu": np.einsum("bhk,bd->hkd", gq, U) + l2 * sh.W_Qu,
        "b_Q": gq.sum(0),
        "W_K": np.einsum("bhk,bd->hkd", gk, V) + l2 * sh.W_K,
    }
    penalty = 0.5 * l2 * sum(float((getattr(sh, n) ** 2).sum()) for n in ("W_Qx", "W_Qu", "W_K"))
    return grads, float(data_loss) + penalty, q


def _sgd_step(
    sh: HARESharedState, grads: dict[str, np.ndarray], learning_rate: float, grad_clip: float
) -> None:
    norm = math.sqrt(sum(float((g**2).sum()) for g in grads.values()))
    scale = learning_rate * min(1.0, grad_clip / norm) if norm > 0 else 0.0
    for name, g in grads.items():
        getattr(sh, name)[...] -= scale * g


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(-1, keepdims=True))
    result: np.ndarray = e / e.sum(-1, keepdims=True)
    return result


@dataclass
class _Forward:
    """One selection's intermediate arrays (not state): kept between the hooks."""

    clusters: np.ndarray  # (K,)
    s: np.ndarray  # (H, K)
    U: np.ndarray  # (H, C)
    attention_heads: np.ndarray  # (H, K)
    z: np.ndarray  # (d_out,)


class HARE(BasePolicy[HAREArmState, HARESharedState, LinearArmState]):
    """HARE over :class:`HAREArmState` (``arm:<id>``), :class:`HARESharedState`
    (``shared``) and a :class:`~bandit_core.linear.LinearArmState` per user (``user:<id>``)."""

    NAME: ClassVar[str] = "hare"
    CONFIG: ClassVar[type[PolicyConfig]] = HAREConfig
    ARM_STATE = HAREArmState
    SHARED_STATE = HARESharedState
    USER_STATE = LinearArmState
    FEATURE_LAYOUT = "context_item"
    config: HAREConfig
    _shared: HARESharedState

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__(config)
        self._forward: _Forward | None = None
        self._changed: set[str] = set()

    # ---- state -------------------------------------------------------------------------
    def _new_arm_state(self) -> HAREArmState:
        return HAREArmState()

    def _new_user_state(self) -> LinearArmState:
        return LinearArmState.prior(self.config.d_item, 1.0)

    def _new_shared_state(self) -> HARESharedState:
        """Gaussian projections with standard deviation 1/sqrt(fan-in), ``Sigma_j = lambda*I``."""
        c = self.config
        H, dk, dv, dx, di, C = (
            c.heads,
            c.key_dim,
            c.value_dim,
            c.context_dim,
            c.d_item,
            c.n_clusters,
        )

        def gauss(*shape: int) -> np.ndarray:
            return self._rng.standard_normal(shape) / math.sqrt(max(shape[-1], 1))

        return HARESharedState(
            W_Qx=gauss(H, dk, dx),
            W_Qu=gauss(H, dk, di),
            b_Q=gauss(H, dk),
            W_K=gauss(H, dk, di),
            W_V=gauss(H, dv, di),
            W_O=gauss(c.out_dim or di, H * dv).T.copy(),
            Sigma=np.broadcast_to(np.eye(dk) * c.ridge_lambda, (H, C, dk, dk)).copy(),
            Sigma_inv=np.broadcast_to(np.eye(dk) / c.ridge_lambda, (H, C, dk, dk)).copy(),
            cluster_n=np.zeros(C, dtype=np.int64),
            since_refactor=np.zeros(C, dtype=np.int64),
            centroids=np.zeros((C, di)),
        )

    def _split_rows(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dx = self.config.context_dim
        ctx = X[:, :dx]
        if dx and not (ctx == ctx[0]).all():
            row = int(np.flatnonzero((ctx != ctx[0]).any(1))[0])
            raise InvalidInputError(
                f"X[:, :{dx}] (the user context) must be identical in every row, but row {row} differs from row 0"
            )
        return ctx[0], X[:, dx:]

    def _user_mean(self, user_id: str | None) -> np.ndarray:
        state = self._user_state(user_id, create=False)
        return np.zeros(self.config.d_item) if state is None else state.theta

    def _assign_clusters(
        self, arm_ids: list[str], states: list[HAREArmState], V: np.ndarray
    ) -> None:
        """Give every arm without a cluster one: the configured mapping, else k-means on
        the first call (seeded by the policy's RNG), else the nearest centroid."""
        todo = [i for i, s in enumerate(states) if s.cluster < 0]
        if not todo:
            return
        if self.config.clusters is not None:
            mapping = self.config.cluster_map
            missing = [arm_ids[i] for i in todo if arm_ids[i] not in mapping]
            if missing:
                raise InvalidInputError(
                    f"arm {missing[0]!r} has no cluster in the configured clusters mapping"
                )
            labels = np.array([mapping[arm_ids[i]] for i in todo])
        else:
            sh = self._shared
            points = V[todo]
            if sh.n_centroids == 0:
                k = min(self.config.n_clusters, len(np.unique(points, axis=0)))
                centroids, labels = kmeans(points, k, self._rng)
                sh.centroids[:k] = centroids
                sh.n_centroids = k
                self._changed.add(SHARED_PART)
            else:
                labels = nearest(points, sh.centroids[: sh.n_centroids])
        for i, label in zip(todo, labels):
            states[i].cluster = int(label)
            self._changed.add(ARM_PREFIX + arm_ids[i])

    # ---- selection ---------------------------------------------------------------------
    def _finish_select(self, decision: Decision) -> Decision:
        """``state_changed`` names the arm parts that got a cluster and ``shared`` when
        k-means set the centroids."""
        changed, self._changed, self._forward = tuple(sorted(self._changed)), set(), None
        return dataclasses.replace(decision, state_changed=changed)

    def _score(
        self, arm_ids: list[str], states: list[HAREArmState], X: np.ndarray, ctx: SelectContext
    ) -> tuple[np.ndarray, np.ndarray]:
        x, V = self._split_rows(X)
        self._assign_clusters(arm_ids, states, V)
        sh, c = self._shared, self.config
        clusters = np.array([s.cluster for s in states], dtype=np.intp)
        q = queries(sh, x[None], self._user_mean(ctx.user_id)[None])[0]
        keys = np.einsum("hkd,nd->hnk", sh.W_K, V)
        s = np.einsum("hk,hnk->hn", q, keys) / math.sqrt(c.key_dim)
        U = np.sqrt(np.maximum(np.einsum("hk,hckl,hl->hc", q, sh.Sigma_inv, q), 0.0))
        attention_heads = _softmax(s + c.alpha * U[:, clusters])
        head_out = np.einsum("hn,hvd,nd->hv", attention_heads, sh.W_V, V)
        self._forward = _Forward(clusters, s, U, attention_heads, head_out.reshape(-1) @ sh.W_O)
        return attention_heads.mean(0), U[:, clusters].mean(0)

    def _choose(
        self,
        arm_ids: list[str],
        X: np.ndarray,
        scores: np.ndarray,
        order: np.ndarray,
        eligible: np.ndarray,
        ctx: SelectContext,
    ) -> int:
        """The two-level rule: best cluster by ``mean s + alpha U``, then its best-attended item.

        Ties between clusters go to the one whose first member comes first in ``order``
        (the attention ranking with random tie-breaks)."""
        fw = self._forward
        assert fw is not None
        C = self.config.n_clusters
        mask = eligible.astype(np.float64)
        n = np.bincount(fw.clusters, weights=mask, minlength=C)
        s_sum = np.bincount(fw.clusters, weights=fw.s.mean(0) * mask, minlength=C)
        value = np.where(
            n > 0, s_sum / np.maximum(n, 1.0) + self.config.alpha * fw.U.mean(0), -np.inf
        )
        best = value.max()
        ranked = order[eligible[order]]
        j_star = next(fw.clusters[i] for i in ranked if value[fw.clusters[i]] == best)
        return int(next(i for i in ranked if fw.clusters[i] == j_star))

    def _decision_extras(
        self, arm_ids: list[str], ranked: np.ndarray, ctx: SelectContext
    ) -> Mapping[str, Any]:
        fw = self._forward
        assert fw is not None
        return {
            "attention": fw.attention_heads.mean(0)[ranked],
            "attention_heads": fw.attention_heads[:, ranked],
            "clusters": fw.clusters[ranked],
            "cluster": int(fw.clusters[ranked[0]]),
            "z": fw.z,
        }

    # ---- learning ----------------------------------------------------------------------
    def _update(
        self, arm_id: str, state: HAREArmState, x: np.ndarray, reward: float, ctx: SelectContext
    ) -> None:
        c, sh = self.config, self._shared
        xc, v = x[: c.context_dim], x[c.context_dim :]
        self._assign_clusters([arm_id], [state], v[None])
        user = self._user_state(ctx.user_id, create=True)
        u = np.zeros(c.d_item) if user is None else user.theta
        grads, _, q = projection_gradients(
            sh, xc[None], u[None], v[None], np.array([reward]), c.loss, c.l2
        )
        j = state.cluster
        q = q[0]
        sh.Sigma[:, j] += q[:, :, None] * q[:, None, :]
        sherman_morrison(sh.Sigma_inv[:, j], q)
        sh.since_refactor[j] += 1
        if sh.since_refactor[j] >= c.refactor_every:
            sh.Sigma_inv[:, j] = cholesky_inverse(sh.Sigma[:, j])
            sh.since_refactor[j] = 0
        sh.cluster_n[j] += 1
        sh.n_updates += 1
        _sgd_step(sh, grads, c.learning_rate, c.grad_clip)
        if user is not None:
            user.add(v / c.sigma, reward / c.sigma, reward, c.refactor_every)
        state.n += 1
        state.reward_sum += reward

    def _arm_stats_extras(self, arm_id: str, state: HAREArmState) -> dict[str, float]:
        return {"cluster": float(state.cluster)}

    def fit_projections(
        self,
        contexts: ArrayLike,
        user_ids: Sequence[str | None],
        items: ArrayLike,
        rewards: ArrayLike,
        *,
        epochs: int = 5,
        batch_size: int = 256,
        learning_rate: float | None = None,
    ) -> np.ndarray:
        """Offline fit of ``W_Qx, W_Qu, b_Q, W_K`` from M logged events (docs/algorithms.md section 4.4,
        Term 1, the ``M >> p`` regime): minibatch gradient descent on the objective of
        :func:`projection_gradients`, starting from the current projections.

        ``contexts (M, d_x)``, ``user_ids`` (M ids or None), ``items (M, d_item)`` the
        served items' embeddings, ``rewards (M,)``, in log order. Each event uses the
        user's posterior mean from that user's *earlier* events in the log (what the
        online policy would have had). Cluster covariances, user states and arm counters
        are not touched. Batches are shuffled with the policy's RNG; the step is
        ``learning_rate`` (default the config's) with the config's gradient clipping.
        Returns the mean objective of each epoch, shape ``(epochs,)``.
        """
        c = self.config
        Xc = check_matrix(contexts, len(user_ids), c.context_dim, "contexts")
        V = check_matrix(items, len(user_ids), c.d_item, "items")
        r = check_matrix(
            np.asarray(rewards, dtype=np.float64)[:, None], len(user_ids), 1, "rewards"
        )[:, 0]
        for value in r:
            check_reward(float(value), c.reward_range)
        epochs = check_int(epochs, "epochs", low=1, error=InvalidInputError)
        batch_size = check_int(batch_size, "batch_size", low=1, error=InvalidInputError)
        if learning_rate is None:
            lr = c.learning_rate
        else:
            lr = check_real(
                learning_rate, "learning_rate", low=0.0, low_open=True, error=InvalidInputError
            )
        U = np.zeros_like(V)
        posteriors: dict[str, LinearArmState] = {}
        for t, uid in enumerate(user_ids):
            if uid is None:
                continue
            post = posteriors.setdefault(uid, self._new_user_state())
            U[t] = post.theta
            post.add(V[t] / c.sigma, r[t] / c.sigma, r[t], c.refactor_every)
        history = np.empty(epochs)
        for e in range(epochs):
            perm = self._rng.permutation(len(r))
            total = 0.0
            for start in range(0, len(r), batch_size):
                b = perm[start : start + batch_size]
                grads, objective, _ = projection_gradients(
                    self._shared, Xc[b], U[b], V[b], r[b], c.loss, c.l2
                )
                _sgd_step(self._shared, grads, lr, c.grad_clip)
                total += objective * len(b)
            history[e] = total / len(r)
        return history
