"""``candidates_json``: the log's candidates column written from the feature matrix is
byte for byte the JSON of the straightforward list of ``{"id", "features"}`` objects."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import orjson
import pytest

from service.usecases.candidates import candidates_json


def straightforward(ids: list[str], X: np.ndarray) -> bytes:
    return orjson.dumps([{"id": a, "features": x} for a, x in zip(ids, X.tolist())])


def shared(K: int, d: int) -> np.ndarray:
    X = np.empty((K, d))
    X[:] = np.random.default_rng(K + d).normal(size=d)  # the context in every row
    return X


def own_features(K: int, d: int) -> np.ndarray:
    X = shared(K, d)
    X[:, d // 2 :] = np.random.default_rng(7).normal(size=(K, d - d // 2))
    return X


def signed_zeros(K: int, d: int) -> np.ndarray:
    # rows equal as numbers but not as text: -0.0 == 0.0
    X = np.zeros((K, d))
    X[1::2, -1] = -0.0
    return X


@pytest.mark.parametrize("make", [shared, own_features, signed_zeros])
@pytest.mark.parametrize(("K", "d"), [(1, 1), (2, 3), (50, 32)])
def test_same_bytes_as_the_list_of_objects(
    make: Callable[[int, int], np.ndarray], K: int, d: int
) -> None:
    ids = [f'arm {i} "quoted" é' for i in range(K)]
    X = make(K, d)
    assert orjson.dumps(candidates_json(ids, X)) == straightforward(ids, X)
