"""``BasePolicy.select_batch``: equal, decision for decision and bit for bit, to calling
``select`` once per request in order, for every registered algorithm (policy.py; the
service's coalesced ``/recommend`` is built on it, docs/performance.md)."""

from __future__ import annotations

import numpy as np
import pytest

import bandit_core
from bandit_core import POLICIES, BanditError, Decision, SelectRequest, make_policy

D = 4
ARMS = ["a", "b", "c", "d", "e"]
NAMES = sorted(POLICIES)


def _rows(rng: np.random.Generator, k: int, integer: bool) -> np.ndarray:
    """Integer-valued features make exact score ties common; normal ones make them rare."""
    return (
        rng.integers(0, 3, size=(k, D)).astype(np.float64) if integer else rng.normal(size=(k, D))
    )


def _trained(name: str, integer: bool, **params: object) -> bandit_core.BasePolicy:
    rng = np.random.default_rng(5)
    p = make_policy(name, d=D, seed=3, **params)
    for _ in range(30):
        X = _rows(rng, len(ARMS), integer)
        dec = p.select(ARMS, X, user_id="u1")
        p.update(dec.arm_id, X[ARMS.index(dec.arm_id)], float(rng.integers(0, 2)), user_id="u1")
    return p


def _requests(rng: np.random.Generator, integer: bool) -> list[SelectRequest]:
    """Mostly the same candidate list (scored together), with other lists, unseen arms
    (cold starts), users, explore=False, and requests select refuses."""
    out = []
    for i in range(40):
        kind = i % 10
        if kind == 3:
            ids = ["c", "a", "e"]
        elif kind == 5:
            ids = [*ARMS, f"new{i}"]  # a cold start
        else:
            ids = ARMS
        X = _rows(rng, len(ids), integer)
        if kind == 7:
            X = X[:, :-1]  # the wrong width: refused
        user = "u1" if kind in (1, 2) else ("u2" if kind == 4 else None)
        out.append(SelectRequest(ids, X, user_id=user, explore=kind != 8))
    out.insert(11, SelectRequest(["a", "a"], np.zeros((2, D))))  # a repeated id: refused
    out.insert(17, SelectRequest(["a", "b"], np.array([[np.inf, 0, 0, 0], [0.0, 0, 0, 0]])))
    return out


def _same(batched: Decision | BanditError, single: Decision | BanditError) -> None:
    if isinstance(single, BanditError):
        assert type(batched) is type(single) and str(batched) == str(single)
        return
    assert isinstance(batched, Decision)
    assert batched.arm_id == single.arm_id and batched.ranking == single.ranking
    assert batched.scores.tobytes() == single.scores.tobytes()
    assert batched.propensities.tobytes() == single.propensities.tobytes()
    assert (batched.widths is None) == (single.widths is None)
    if single.widths is not None:
        assert batched.widths.tobytes() == single.widths.tobytes()
    assert batched.explored == single.explored and batched.guardrail == single.guardrail
    assert batched.state_changed == single.state_changed
    assert batched.extras.keys() == single.extras.keys()


def _one_by_one(policy: bandit_core.BasePolicy, r: SelectRequest) -> Decision | BanditError:
    try:
        return policy.select(
            r.arm_ids, r.X, user_id=r.user_id, features=r.features, explore=r.explore
        )
    except BanditError as exc:
        return exc


@pytest.mark.parametrize("integer", [False, True], ids=["normal", "integer"])
@pytest.mark.parametrize("epsilon", [0.0, 0.3])
@pytest.mark.parametrize("name", NAMES)
def test_select_batch_equals_one_select_per_request(
    name: str, epsilon: float, integer: bool
) -> None:
    p = _trained(name, integer, epsilon=epsilon)
    p.retire_arm("d")
    q = type(p).from_bytes(p.to_bytes())
    rng = np.random.default_rng(11)
    requests = _requests(rng, integer)
    retired = SelectRequest(["a", "d"], np.zeros((2, D)))  # refused: "d" was retired
    for batch in (requests[:1], requests[1:3], [*requests[3:30], retired], requests[30:]):
        decisions = p.select_batch(batch)
        assert len(decisions) == len(batch)
        for got, r in zip(decisions, batch):
            _same(got, _one_by_one(q, r))
        assert p.to_bytes() == q.to_bytes()  # every part and the RNG state
    for s in (p, q):  # and after learning, the next batch still agrees
        s.update("a", np.ones(D), 1.0)
    for got, r in zip(p.select_batch(requests[:12]), requests[:12]):
        _same(got, _one_by_one(q, r))
    assert p.to_bytes() == q.to_bytes()


@pytest.mark.parametrize("name", NAMES)
def test_batches_selections_unless_a_selection_changes_state(name: str) -> None:
    """Guardrails (counters) and HARE (cluster assignments) change state as they select:
    their select_batch is a loop over select."""
    assert make_policy(name, d=D).batches_selections == (name not in ("guardrailed_linucb", "hare"))
