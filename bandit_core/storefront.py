"""A simulated storefront with known click rates (docs/algorithms.md sections 7 and 8).

Shoppers of four segments with different tastes arrive one per round, each with a JSON
context such as ``{"user": {"segment": "student", "tenureYears": 2}, "device": {"type":
"mobile"}}``; a sample of ``offered`` items of the catalog is shown, each with JSON
features such as ``{"item": {"category": "food", "price": 12.5, "tags": ["vegan"]}}``;
the policy picks one and a Bernoulli click with the item's expected click rate follows.
At round ``replace_at`` every item is replaced by a new one drawn from the same generator,
under an id never used before: a per-arm model starts over, a shared model that scores
items by their features need not.

**Click model** (closed form, :meth:`Storefront.click_probability`). For a shopper of
segment ``s``, tenure ``n`` years and device ``v``, and an item of category ``c``, price
``p`` and tags ``T``:

    logit = BASE_LOGIT + CATEGORY_AFFINITY[s][c] + sum_{t in T} TAG_AFFINITY[s][t]
            - PRICE_SENSITIVITY[s] * p / 100 + TENURE_SLOPE * n + DEVICE_OFFSET[v] + q_i
    mu    = 1 / (1 + exp(-logit))

``q_i`` is the item's hidden quality, ``N(0, quality_sd^2)``, drawn with the item and absent
from its JSON (what a per-arm model can learn and a shared one cannot). The ranking of
items depends on segment x category, segment x tag and segment x price: a model without
context x action interactions learns one ranking for everyone.

**Generator**. A shopper: segment by ``SEGMENT_WEIGHTS``, tenure ``min(Geometric(1/3) - 1,
10)`` years, device by ``DEVICE_WEIGHTS``. An item: category uniform; price
``round(CATEGORY_PRICE[c] * exp(N(0, 0.5^2)), 2)``; each tag of ``CATEGORY_TAGS[c]``
independently with probability ``TAG_PROBABILITY``.

>>> import numpy as np
>>> shop = Storefront()
>>> rounds = list(shop.rounds(3, replace_at=2, rng=np.random.default_rng(0)))
>>> rounds[0].item_ids[0].startswith("c0-"), rounds[2].item_ids[0].startswith("c1-")
(True, True)
>>> sorted(rounds[0].context), sorted(rounds[0].actions[0]["item"])
(['device', 'user'], ['category', 'price', 'tags'])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from bandit_core.batch_updates import BatchUpdates
from bandit_core.errors import InvalidInputError
from bandit_core.features import Featurizer, SparseRows
from bandit_core.policy import Policy

SEGMENTS = ("student", "parent", "foodie", "techie")
SEGMENT_WEIGHTS = (0.3, 0.25, 0.25, 0.2)
CATEGORIES = ("books", "food", "electronics", "toys", "garden")
TAGS = ("vegan", "new", "sale", "premium", "eco", "kids")
DEVICES = ("mobile", "desktop", "tablet")
DEVICE_WEIGHTS = (0.6, 0.3, 0.1)

BASE_LOGIT = -3.0
CATEGORY_AFFINITY: dict[str, dict[str, float]] = {
    "student": {"books": 1.5, "food": 0.5, "electronics": 1.0, "toys": -1.0, "garden": -1.5},
    "parent": {"books": 0.0, "food": 0.5, "electronics": -0.5, "toys": 1.8, "garden": 1.0},
    "foodie": {"books": -0.5, "food": 2.0, "electronics": -1.0, "toys": -1.0, "garden": 0.8},
    "techie": {"books": 0.5, "food": -0.5, "electronics": 2.0, "toys": 0.0, "garden": -1.0},
}
TAG_AFFINITY: dict[str, dict[str, float]] = {
    "student": {"sale": 0.8, "new": 0.3, "premium": -0.8},
    "parent": {"kids": 1.0, "eco": 0.3, "sale": 0.3},
    "foodie": {"vegan": 1.0, "eco": 0.5, "premium": 0.5},
    "techie": {"new": 0.8, "premium": 0.5, "sale": -0.2},
}
PRICE_SENSITIVITY: dict[str, float] = {"student": 1.5, "parent": 0.8, "foodie": 0.3, "techie": 0.2}
"""Logit lost per 100 of price."""
TENURE_SLOPE = 0.1
DEVICE_OFFSET: dict[str, float] = {"mobile": -0.2, "desktop": 0.0, "tablet": -0.1}
CATEGORY_PRICE: dict[str, float] = {
    "books": 15.0,
    "food": 12.0,
    "electronics": 150.0,
    "toys": 30.0,
    "garden": 40.0,
}
CATEGORY_TAGS: dict[str, tuple[str, ...]] = {
    "books": ("new", "sale", "premium", "kids"),
    "food": ("vegan", "new", "sale", "premium", "eco"),
    "electronics": ("new", "sale", "premium", "eco"),
    "toys": ("new", "sale", "kids", "eco"),
    "garden": ("eco", "sale", "new", "vegan"),
}
TAG_PROBABILITY = 0.35
MAX_TENURE_YEARS = 10
_SEGMENT_CDF = np.cumsum(SEGMENT_WEIGHTS)[:-1]
_DEVICE_CDF = np.cumsum(DEVICE_WEIGHTS)[:-1]


@dataclass(frozen=True)
class Shopper:
    """One arriving user; :meth:`features` is the JSON context a frontend would send."""

    segment: str
    tenure_years: int
    device: str

    def features(self) -> dict[str, Any]:
        return {
            "user": {"segment": self.segment, "tenureYears": self.tenure_years},
            "device": {"type": self.device},
        }


@dataclass(frozen=True)
class Item:
    """One catalog item; ``quality`` is hidden (not in :meth:`features`)."""

    item_id: str
    category: str
    price: float
    tags: tuple[str, ...]
    quality: float

    def features(self) -> dict[str, Any]:
        return {"item": {"category": self.category, "price": self.price, "tags": list(self.tags)}}


@dataclass(frozen=True)
class StorefrontRound:
    """One round: the shopper, the offered items (ids and JSON features, in the same
    order) and their expected click rates ``mu`` (K,)."""

    shopper: Shopper
    items: tuple[Item, ...]
    mu: np.ndarray

    @property
    def context(self) -> dict[str, Any]:
        return self.shopper.features()

    @property
    def item_ids(self) -> list[str]:
        return [item.item_id for item in self.items]

    @property
    def actions(self) -> list[dict[str, Any]]:
        return [item.features() for item in self.items]


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


@dataclass(frozen=True)
class Storefront:
    """The storefront's shape: ``catalog_size`` items, ``offered`` of them (sampled
    without replacement) shown each round, hidden item quality of spread ``quality_sd``."""

    catalog_size: int = 100
    offered: int = 10
    quality_sd: float = 0.3

    def __post_init__(self) -> None:
        if not 2 <= self.offered <= self.catalog_size:
            raise InvalidInputError(
                f"offered must be in [2, catalog_size] = [2, {self.catalog_size}], but got {self.offered}"
            )
        if not self.quality_sd >= 0:
            raise InvalidInputError(f"quality_sd must be >= 0, but got {self.quality_sd}")

    @staticmethod
    def click_probability(shopper: Shopper, item: Item) -> float:
        """The expected click rate of ``shopper`` on ``item`` (module docstring's closed form)."""
        s = shopper.segment
        logit = (
            BASE_LOGIT
            + CATEGORY_AFFINITY[s][item.category]
            + sum(TAG_AFFINITY[s].get(t, 0.0) for t in item.tags)
            - PRICE_SENSITIVITY[s] * item.price / 100.0
            + TENURE_SLOPE * shopper.tenure_years
            + DEVICE_OFFSET[shopper.device]
            + item.quality
        )
        return _sigmoid(logit)

    @staticmethod
    def draw_shopper(rng: np.random.Generator) -> Shopper:
        """A shopper by the generator of the module docstring."""
        segment, device = rng.random(2)
        tenure = min(int(rng.geometric(1 / 3)) - 1, MAX_TENURE_YEARS)
        return Shopper(
            SEGMENTS[int(np.searchsorted(_SEGMENT_CDF, segment, side="right"))],
            tenure,
            DEVICES[int(np.searchsorted(_DEVICE_CDF, device, side="right"))],
        )

    def draw_catalog(self, generation: int, rng: np.random.Generator) -> tuple[Item, ...]:
        """``catalog_size`` new items with ids ``c<generation>-<j>``, by the generator of
        the module docstring."""
        items = []
        for j in range(self.catalog_size):
            category = CATEGORIES[rng.integers(len(CATEGORIES))]
            price = round(CATEGORY_PRICE[category] * math.exp(0.5 * rng.standard_normal()), 2)
            pool = CATEGORY_TAGS[category]
            tags = tuple(
                t
                for t, keep in zip(pool, rng.random(len(pool)) < TAG_PROBABILITY, strict=True)
                if keep
            )
            quality = self.quality_sd * float(rng.standard_normal())
            items.append(Item(f"c{generation}-{j}", category, price, tags, quality))
        return tuple(items)

    def rounds(
        self, n: int, replace_at: int | None, rng: np.random.Generator
    ) -> Iterator[StorefrontRound]:
        """``n`` rounds; from round ``replace_at`` (0-based) on, a new catalog (generation
        1, ids ``c1-*``) replaces the first (``c0-*``). ``rng`` draws everything."""
        catalog = self.draw_catalog(0, rng)
        for t in range(n):
            if t == replace_at:
                catalog = self.draw_catalog(1, rng)
            shopper = self.draw_shopper(rng)
            items = tuple(
                catalog[j] for j in rng.choice(self.catalog_size, size=self.offered, replace=False)
            )
            yield StorefrontRound(
                shopper, items, np.array([self.click_probability(shopper, i) for i in items])
            )


Encoder = Callable[[dict[str, Any], Sequence[dict[str, Any]]], np.ndarray | SparseRows]
"""JSON context and K JSON actions -> the (K, d) rows a policy scores (dense, or sparse
for a policy that takes sparse rows)."""


def shared_rows(featurizer: Featurizer) -> Encoder:
    """Rows of a shared model: each action's vector (context, action, interactions, bias;
    docs/algorithms.md section 7), in the featurizer's output form (sparse rows for a
    model of large hashed spaces, ``diag_linucb``)."""
    return lambda context, actions: featurizer.featurize(context, actions).actions


def context_rows(featurizer: Featurizer) -> Encoder:
    """Rows of a per-arm model: the context's vector, the same for every action. The
    featurizer's output must be dense."""

    def encode(context: dict[str, Any], actions: Sequence[dict[str, Any]]) -> np.ndarray:
        x = cast(
            np.ndarray, featurizer.featurize_context(context)
        )  # dense, as the docstring requires
        return np.broadcast_to(x, (len(actions), x.size))

    return encode


@dataclass(frozen=True)
class StorefrontRun:
    """Per round (shape (rounds,)): ``clicks`` (0/1), ``chosen_mu`` the expected click rate
    of the chosen item, ``best_mu`` that of the best offered item (the oracle)."""

    clicks: np.ndarray
    chosen_mu: np.ndarray
    best_mu: np.ndarray
    replace_at: int | None = None

    @property
    def regret(self) -> float:
        """Cumulative pseudo-regret ``sum_t best_mu - chosen_mu``."""
        return float((self.best_mu - self.chosen_mu).sum())


def run_storefront(
    policy: Policy,
    encode: Encoder,
    shop: Storefront,
    rounds: int,
    replace_at: int | None,
    rng: np.random.Generator,
    *,
    progress: Callable[[int], None] | None = None,
    fold_every: int = 1,
) -> StorefrontRun:
    """Let ``policy`` choose among the offered items of ``rounds`` rounds of ``shop`` (rows
    by ``encode``), draw a Bernoulli click with the chosen item's ``mu`` and learn from it.
    ``rng`` spawns two streams, one for the storefront (catalogs, shoppers, offers) and one
    for the clicks, so runs of different policies from equal ``rng`` see the same shoppers
    and offers whatever they choose.

    ``fold_every`` > 1 learns the clicks as the service's folded updates do (docs/
    architecture.md, "Folded model updates"): kept aside and learned together by
    ``update_batch`` after every ``fold_every`` rounds, so a round chooses with the model
    of the last completed batch (a 1 s fold at ``R`` rewards a second: ``fold_every=R``)."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise InvalidInputError(f"rounds must be a positive int, but got {rounds!r}")
    if isinstance(fold_every, bool) or not isinstance(fold_every, int) or fold_every < 1:
        raise InvalidInputError(f"fold_every must be a positive int, but got {fold_every!r}")
    learn_batch = policy.update_batch if isinstance(policy, BatchUpdates) else None
    if fold_every > 1 and learn_batch is None:
        raise InvalidInputError("fold_every above 1 needs a policy with update_batch")
    world, clicks_rng = rng.spawn(2)
    clicks, chosen, best = np.empty(rounds), np.empty(rounds), np.empty(rounds)
    arms: list[str] = []
    rows: list[Any] = []
    for t, r in enumerate(shop.rounds(rounds, replace_at, world)):
        ids = r.item_ids
        X = encode(r.context, r.actions)
        k = ids.index(policy.select(ids, X).arm_id)
        clicks[t] = float(clicks_rng.random() < r.mu[k])
        row = X.one_row(k) if isinstance(X, SparseRows) else X[k]
        if fold_every == 1 or learn_batch is None:
            policy.update(ids[k], row, clicks[t])
        else:
            arms.append(ids[k])
            rows.append(row)
            if len(arms) == fold_every:
                learn_batch(arms, rows, clicks[t + 1 - fold_every : t + 1].tolist())
                arms, rows = [], []
        chosen[t], best[t] = r.mu[k], r.mu.max()
        if progress is not None:
            progress(1)
    return StorefrontRun(clicks=clicks, chosen_mu=chosen, best_mu=best, replace_at=replace_at)
