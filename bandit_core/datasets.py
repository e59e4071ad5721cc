"""Logged bandit data and classification data sets, as plain numpy arrays.

Three sources (docs/algorithms.md section 6):

* the **news format** (:func:`load_news`): 102 integers a line, the logged arm
  (0-based), the click (0/1), then 10 features for each of the 10 arms in arm order
  (arm ``a``'s features are columns ``2+10a .. 11+10a``). The news data set of the
  LNUCB-TA paper's Table 3 ships with the package, gzip-compressed
  (:func:`news_dataset_path`); ``load_news()`` with no path reads it;
* **JSON Lines** logs (:class:`JsonlLog`, :func:`load_jsonl`), one event a line::

      {"candidates": [{"id": "a", "features": [0.1, 0.2]}, {"id": "b", "features": [0.0, 1.0]}],
       "context": [1.0],              # optional, shared by every candidate
       "arm_id": "b",                 # id of the served arm
       "reward": 1.0,
       "propensity": 0.5,             # optional: probability the logging policy served arm_id
       "user_id": "u1",               # optional
       "created_at": 1700000000.0}    # optional, unix seconds (not read; lines are in time order)

  Candidate ``x = concat(context, features)`` (either part may be absent); every
  candidate of an event must end with the same length ``d``. The key names are those
  of the service's ``DecisionRecord`` (whose candidates' ``features`` already hold the
  full ``x``, so its ``context`` is left out) plus the reward's value;
* **classification CSV** (:func:`load_classification_csv`): a header row, one label
  column, numeric feature columns; each class becomes an arm (Zhang et al. 2021, as in
  the LNUCB-TA paper's Table 2).

Any iterable of :class:`LoggedEvent` in time order is a :class:`LogSource`, which is all
the replay evaluators need. The service's own event log is one through
``service.storage.offline_source.EventLogSource`` (outside ``bandit_core``), which builds, for a
decision ``d`` and its reward ``r``::

    LoggedEvent.build([c["id"] for c in d.candidates], d.arm_id, r.value,
                      arm_features=[c["features"] for c in d.candidates],
                      pscore=d.propensity, user_id=d.user_id)

The only I/O in :mod:`bandit_core` is here: loaders read the path they are given (or,
for :func:`load_news`, the packaged data set). A path ending in ``.gz`` is read
through gzip.
"""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Protocol, TextIO, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

from bandit_core.errors import InvalidInputError
from bandit_core.validation import check_arm_ids

NEWS_ARMS = 10
NEWS_FEATURES = 10


@dataclass(frozen=True)
class LoggedEvent:
    """One logged decision and its reward.

    ``arm_ids`` (K,) are the candidates, ``X`` (K, d) their feature rows, ``action`` the
    index of the served arm in ``arm_ids``, ``reward`` what it earned and ``pscore`` the
    logging policy's probability of serving it (``None`` when unknown). ``time``: when
    the decision was made (seconds, e.g. Unix time; ``None`` when unknown), the time a
    replay runs a policy with a wall clock at (docs/algorithms.md section 10.3).
    """

    arm_ids: tuple[str, ...]
    X: np.ndarray
    action: int
    reward: float
    pscore: float | None = None
    user_id: str | None = None
    time: float | None = None

    @property
    def chosen(self) -> str:
        """Id of the served arm."""
        return self.arm_ids[self.action]

    @classmethod
    def build(
        cls,
        arm_ids: Sequence[str],
        arm_id: str,
        reward: float,
        *,
        context: ArrayLike | None = None,
        arm_features: ArrayLike | None = None,
        pscore: float | None = None,
        user_id: str | None = None,
        time: float | None = None,
    ) -> LoggedEvent:
        """An event from its parts: ``x_a = concat(context, arm_features[a])``; ``arm_id``
        is the served candidate.

        ``arm_features`` has shape (K, d_arm) (or is None), ``context`` shape (d_ctx,).

        >>> e = LoggedEvent.build(["a", "b"], "b", 1.0, context=[1.0], arm_features=[[2.0], [3.0]])
        >>> e.X.tolist(), e.action
        ([[1.0, 2.0], [1.0, 3.0]], 1)
        """
        ids = tuple(check_arm_ids(arm_ids))
        if arm_id not in ids:
            raise InvalidInputError(
                f"arm_id must be one of the candidates {list(ids)}, but got {arm_id!r}"
            )
        k = len(ids)
        ctx = np.zeros(0) if context is None else np.asarray(context, dtype=np.float64)
        feats = (
            np.zeros((k, 0)) if arm_features is None else np.asarray(arm_features, dtype=np.float64)
        )
        if ctx.ndim != 1:
            raise InvalidInputError(f"context must be a vector, but got shape {ctx.shape}")
        if feats.ndim != 2 or feats.shape[0] != k:
            raise InvalidInputError(
                f"arm_features must have shape ({k}, d_arm), but got {feats.shape}"
            )
        X = np.concatenate([np.broadcast_to(ctx, (k, ctx.size)), feats], axis=1)
        if X.shape[1] == 0:
            raise InvalidInputError("an event needs a context or arm features, but got neither")
        if not np.isfinite(X).all():
            raise InvalidInputError("context and arm_features must be finite")
        if pscore is not None and not 0.0 < float(pscore) <= 1.0:
            raise InvalidInputError(f"pscore must be in (0, 1], but got {pscore!r}")
        return cls(
            arm_ids=ids,
            X=X,
            action=ids.index(arm_id),
            reward=float(reward),
            pscore=None if pscore is None else float(pscore),
            user_id=user_id,
            time=time,
        )


@runtime_checkable
class LogSource(Protocol):
    """Logged events in time order. A list of :class:`LoggedEvent` is one; so is
    :class:`BanditLog`, :class:`JsonlLog` and the service's event-log reader."""

    def __iter__(self) -> Iterator[LoggedEvent]: ...


@dataclass(frozen=True)
class BanditLog:
    """``n`` logged events over one fixed set of ``K`` arms, as arrays.

    ``features`` (n, K, d) float64, ``action`` (n,) int index into ``arm_ids``,
    ``reward`` (n,) float64, ``pscore`` (n,) float64 or None. Iterating yields
    :class:`LoggedEvent` objects, so a ``BanditLog`` is a :class:`LogSource`.
    """

    arm_ids: tuple[str, ...]
    features: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    pscore: np.ndarray | None = None

    def __post_init__(self) -> None:
        n, k = self.action.shape[0], len(self.arm_ids)
        if self.features.ndim != 3 or self.features.shape[:2] != (n, k):
            raise InvalidInputError(
                f"features must have shape (n, K, d) = ({n}, {k}, d), but got {self.features.shape}"
            )
        if self.reward.shape != (n,):
            raise InvalidInputError(f"reward must have shape ({n},), but got {self.reward.shape}")
        if n and (self.action.min() < 0 or self.action.max() >= k):
            raise InvalidInputError(
                f"action must index the {k} arms, but got values in [{self.action.min()}, {self.action.max()}]"
            )
        if self.pscore is not None and self.pscore.shape != (n,):
            raise InvalidInputError(f"pscore must have shape ({n},), but got {self.pscore.shape}")

    def __len__(self) -> int:
        return int(self.action.shape[0])

    @property
    def d(self) -> int:
        """Length of each candidate's feature vector."""
        return int(self.features.shape[2])

    def __iter__(self) -> Iterator[LoggedEvent]:
        ps = self.pscore
        for i in range(len(self)):
            yield LoggedEvent(
                arm_ids=self.arm_ids,
                X=self.features[i],
                action=int(self.action[i]),
                reward=float(self.reward[i]),
                pscore=None if ps is None else float(ps[i]),
            )

    @classmethod
    def from_events(cls, events: LogSource) -> BanditLog:
        """Stack events that share one candidate list and ``d`` into arrays."""
        evs = list(events)
        if not evs:
            raise InvalidInputError("events must hold at least one event, but got none")
        ids = evs[0].arm_ids
        for i, e in enumerate(evs):
            if e.arm_ids != ids or e.X.shape != evs[0].X.shape:
                raise InvalidInputError(
                    f"every event must have the candidates {list(ids)} with d = {evs[0].X.shape[1]}, "
                    f"but event {i} has {list(e.arm_ids)} with X of shape {e.X.shape}"
                )
        known = [e.pscore is not None for e in evs]
        if any(known) and not all(known):
            raise InvalidInputError(
                f"pscore must be given for every event or none, but event {known.index(False)} lacks it"
            )
        return cls(
            arm_ids=ids,
            features=np.stack([e.X for e in evs]),
            action=np.array([e.action for e in evs], dtype=np.intp),
            reward=np.array([e.reward for e in evs], dtype=np.float64),
            pscore=np.array([e.pscore for e in evs], dtype=np.float64) if all(known) else None,
        )


def news_dataset_path() -> Path:
    """Path of the news data set shipped with the package (``bandit_core/data/news_dataset.txt.gz``).

    10,000 events logged by a uniformly random policy over 10 news articles, in the news
    format of the module docstring: the data set of the LNUCB-TA paper's Table 3
    (docs/algorithms.md section 6).
    """
    return Path(str(resources.files("bandit_core") / "data" / "news_dataset.txt.gz"))


def load_news(path: str | Path | None = None) -> BanditLog:
    """Read a file in the news format (see the module docstring) into a :class:`BanditLog`.

    ``path`` defaults to the packaged news data set (:func:`news_dataset_path`); a path
    ending in ``.gz`` is decompressed. Arms are named ``"0"`` .. ``"9"``; the log is
    uniformly random, so ``pscore`` is ``1/10`` for every event. Returns features of
    shape (n, 10, 10).
    """
    if path is None:
        path = news_dataset_path()
    try:
        raw = np.loadtxt(path, dtype=np.int64, ndmin=2)
    except (ValueError, EOFError, gzip.BadGzipFile) as exc:
        raise InvalidInputError(
            f"{path}: not the news format (102 integers a line): {exc}"
        ) from exc
    width = 2 + NEWS_ARMS * NEWS_FEATURES
    if raw.shape[1] != width:
        raise InvalidInputError(
            f"{path}: the news format has {width} integers a line, but got {raw.shape[1]}"
        )
    if not np.isin(raw[:, 1], (0, 1)).all():
        raise InvalidInputError(f"{path}: column 1 (click) must be 0 or 1")
    n = raw.shape[0]
    return BanditLog(
        arm_ids=tuple(str(a) for a in range(NEWS_ARMS)),
        features=raw[:, 2:].reshape(n, NEWS_ARMS, NEWS_FEATURES).astype(np.float64),
        action=raw[:, 0].astype(np.intp),
        reward=raw[:, 1].astype(np.float64),
        pscore=np.full(n, 1.0 / NEWS_ARMS),
    )


def parse_event(obj: Mapping[str, Any]) -> LoggedEvent:
    """One JSON Lines record (schema in the module docstring) as a :class:`LoggedEvent`.

    >>> parse_event({"candidates": [{"id": "a", "features": [1]}, {"id": "b", "features": [2]}],
    ...              "arm_id": "a", "reward": 0}).X.shape
    (2, 1)
    """
    for key in ("candidates", "arm_id", "reward"):
        if key not in obj:
            raise InvalidInputError(f"an event needs the key {key!r}, but got keys {sorted(obj)}")
    cands = obj["candidates"]
    if not isinstance(cands, list) or not all(isinstance(c, Mapping) and "id" in c for c in cands):
        raise InvalidInputError("candidates must be a list of objects with an 'id'")
    has_feats = [c.get("features") is not None for c in cands]
    if any(has_feats) and not all(has_feats):
        raise InvalidInputError("features must be given for every candidate or none")
    return LoggedEvent.build(
        [c["id"] for c in cands],
        obj["arm_id"],
        obj["reward"],
        context=obj.get("context"),
        arm_features=[c["features"] for c in cands] if all(has_feats) else None,
        pscore=obj.get("propensity"),
        user_id=obj.get("user_id"),
    )


def open_text(path: str | Path) -> TextIO:
    """``path`` opened for reading as UTF-8 text, through gzip when it ends in ``.gz``."""
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


@dataclass(frozen=True)
class JsonlLog:
    """A JSON Lines log streamed from ``path`` one event at a time (a :class:`LogSource`)."""

    path: Path

    def __iter__(self) -> Iterator[LoggedEvent]:
        with open_text(self.path) as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    yield parse_event(json.loads(line))
                except (json.JSONDecodeError, InvalidInputError, TypeError, ValueError) as exc:
                    raise InvalidInputError(f"{self.path}:{lineno}: {exc}") from exc


def load_jsonl(path: str | Path) -> BanditLog:
    """Read a JSON Lines log whose events share one candidate list into a :class:`BanditLog`."""
    return BanditLog.from_events(JsonlLog(Path(path)))


@dataclass(frozen=True)
class ClassificationData:
    """A classification data set: ``X`` (n, d) rows scaled to unit L2 norm, ``labels``
    (n,) int index into ``classes`` (the class names, sorted)."""

    X: np.ndarray
    labels: np.ndarray
    classes: tuple[str, ...]

    def shuffled(self, rng: np.random.Generator) -> ClassificationData:
        """The rows in an order drawn from ``rng``."""
        perm = rng.permutation(len(self.labels))
        return ClassificationData(self.X[perm], self.labels[perm], self.classes)


def load_classification_csv(path: str | Path, label_column: str) -> ClassificationData:
    """Read a CSV with a header into a :class:`ClassificationData`.

    Every column except ``label_column`` must be numeric; labels are any strings. Rows
    are scaled to unit L2 norm (all-zero rows stay zero). Rows keep the file's order;
    shuffle with :meth:`ClassificationData.shuffled`.
    """
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        raise InvalidInputError(f"{path}: the CSV is empty")
    header, body = rows[0], [r for r in rows[1:] if r]
    if label_column not in header:
        raise InvalidInputError(f"{path}: label column {label_column!r} not in the header {header}")
    if not body:
        raise InvalidInputError(f"{path}: the CSV has a header but no rows")
    li = header.index(label_column)
    feat_cols = [i for i in range(len(header)) if i != li]
    if not feat_cols:
        raise InvalidInputError(
            f"{path}: the CSV needs at least one feature column besides {label_column!r}"
        )
    X = np.empty((len(body), len(feat_cols)))
    for r, row in enumerate(body):
        if len(row) != len(header):
            raise InvalidInputError(
                f"{path}: row {r + 2} has {len(row)} fields, but the header has {len(header)}"
            )
        for j, c in enumerate(feat_cols):
            try:
                X[r, j] = float(row[c])
            except ValueError:
                raise InvalidInputError(
                    f"{path}: column {header[c]!r} must be numeric, but row {r + 2} holds {row[c]!r}"
                ) from None
    if not np.isfinite(X).all():
        raise InvalidInputError(f"{path}: feature values must be finite")
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    X = X / np.where(norms > 0, norms, 1.0)
    classes, labels = np.unique([row[li] for row in body], return_inverse=True)
    return ClassificationData(
        X=X, labels=labels.astype(np.intp), classes=tuple(str(c) for c in classes)
    )
