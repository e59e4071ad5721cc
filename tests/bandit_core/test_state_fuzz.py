"""Corrupted state is refused with StateFormatError, never taken in and never another
exception (issue 16, item 11): seeded byte mutations, truncations and sealed headers
that declare hostile fields, over every registered algorithm's snapshot and state parts.

``sealed`` builds blobs by the documented layout (bandit_core/state.py) with a correct
checksum, so the header checks themselves are exercised, not only the CRC."""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from bandit_core import POLICIES, BasePolicy, StateFormatError, make_policy, policy_from_bytes
from bandit_core.state import MAGIC, MAGIC_V1, unpack

NAMES = sorted(POLICIES)
MUTATIONS = 150
TRUNCATIONS = 30


def trained(name: str) -> BasePolicy:
    """A policy with arm, shared and user parts that learned from a few rewards."""
    policy = make_policy(name, d=3, seed=0)
    rng = np.random.default_rng(0)
    for i in range(6):
        X = np.tile(rng.random(3), (3, 1))
        dec = policy.select(["a", "b", "c"], X, user_id=f"u{i % 2}")
        policy.update(dec.arm_id, X[0], float(i % 2), user_id=f"u{i % 2}")
    return policy


def sealed(header: Any, payload: bytes = b"", magic: bytes = MAGIC) -> bytes:
    """A blob of the documented layout with ``header`` (any JSON) and a valid checksum."""
    text = json.dumps(header).encode()
    body = struct.pack("<I", len(text)) + text + payload
    if magic == MAGIC_V1:
        return magic + body
    return magic + struct.pack("<I", zlib.crc32(body)) + body


def corruptions(
    blob: bytes, seed: int, mutations: int = MUTATIONS, truncations: int = TRUNCATIONS
) -> Iterator[bytes]:
    """Seeded damage: 1 to 4 changed bytes, truncations, one inserted or dropped byte."""
    rng = np.random.default_rng(seed)
    for _ in range(mutations):
        data = bytearray(blob)
        for pos in rng.choice(len(blob), size=int(rng.integers(1, 5)), replace=False):
            data[pos] ^= int(rng.integers(1, 256))  # never the same byte again
        yield bytes(data)
    for cut in rng.choice(len(blob), size=truncations, replace=False):
        yield blob[:cut]
    pos = int(rng.integers(0, len(blob)))
    yield blob[:pos] + bytes([int(rng.integers(0, 256))]) + blob[pos:]
    yield blob[:pos] + blob[pos + 1 :]


def refuses(load: Callable[[bytes], Any], data: bytes) -> None:
    with pytest.raises(StateFormatError):
        load(data)


@pytest.mark.parametrize("name", NAMES)
def test_corrupted_snapshots_are_refused(name: str) -> None:
    blob = trained(name).to_bytes()
    assert policy_from_bytes(blob).to_bytes() == blob
    for data in corruptions(blob, seed=NAMES.index(name)):
        refuses(policy_from_bytes, data)
        refuses(POLICIES[name].from_bytes, data)


@pytest.mark.parametrize("name", NAMES)
def test_corrupted_state_parts_are_refused(name: str) -> None:
    """The same format holds every state part in Redis: each part's damage is refused
    and leaves the policy's state as it was."""
    policy = trained(name)
    before = policy.to_bytes()
    for i, (part, blob) in enumerate(sorted(policy.export_parts(policy.part_names()).items())):
        for data in corruptions(blob, seed=100 + i):
            with pytest.raises(StateFormatError):
                policy.import_parts({part: data})
    assert policy.to_bytes() == before


HOSTILE_ARRAYS: list[Any] = [
    [["x", "<f8", [10**12, 10**12]]],  # oversized: 8e24 bytes declared
    [["x", "<f8", [2**62, 2**62, 16]]],  # would wrap around in int64
    [["x", "<f8", [-1]]],
    [["x", "<f8", [True]]],
    [["x", "<f8", [1.5]]],
    [["x", "<f8", [1] * 40]],
    [["x", "<f8", "3"]],
    [["x", "|O", [1]]],
    [["x", "<U3", [1]]],
    [["x", "|V8", [1]]],
    [["x", "f8", [1]]],
    [["x", "<f8,<i8", [1]]],
    [["x", "no-such-dtype", [1]]],
    [["x", 7, [1]]],
    [[3, "<f8", [1]]],
    [["x", "<f8", [1]], ["x", "<f8", [1]]],
    [["x", "<f8"]],
    ["x"],
    {"x": 1},
]


@pytest.mark.parametrize("arrays", HOSTILE_ARRAYS, ids=range(len(HOSTILE_ARRAYS)))
def test_hostile_array_declarations_are_refused(arrays: Any) -> None:
    refuses(unpack, sealed({"kind": "demo", "meta": {}, "arrays": arrays}, b"\0" * 16))


HOSTILE_HEADERS: list[Any] = [
    [],
    "policy",
    None,
    {"kind": "policy", "meta": {}},
    {"kind": 1, "meta": {}, "arrays": []},
    {"kind": "policy", "meta": [], "arrays": []},
    {"kind": "policy", "meta": {}, "arrays": [], "extra": 1},
]


@pytest.mark.parametrize("header", HOSTILE_HEADERS, ids=range(len(HOSTILE_HEADERS)))
def test_hostile_headers_are_refused(header: Any) -> None:
    refuses(unpack, sealed(header))
    refuses(policy_from_bytes, sealed(header))


def _policy_meta(**changes: Any) -> dict[str, Any]:
    _, meta, _ = unpack(make_policy("linucb", d=3, seed=0).to_bytes())
    return {**meta, **changes}


HOSTILE_POLICY_META: list[dict[str, Any]] = [
    _policy_meta(algorithm="no_such_algorithm"),
    _policy_meta(algorithm=["linucb"]),
    _policy_meta(rng={"bit_generator": "PCG64"}),  # the KeyError: 'state' of the issue
    _policy_meta(rng={"bit_generator": "PCG64", "state": {"state": "x", "inc": 1}}),
    _policy_meta(rng={"bit_generator": "MT19937", "state": {}}),
    _policy_meta(rng=7),
    _policy_meta(config={"d": 3, "no_such_field": 1}),
    _policy_meta(config={"d": -3}),
    _policy_meta(config=None),
    _policy_meta(parts="arm:a"),
    _policy_meta(parts=["arm:a"]),  # declares a part whose array is missing
    _policy_meta(retired=[1]),
    {k: v for k, v in _policy_meta().items() if k != "rng"},
]


@pytest.mark.parametrize("meta", HOSTILE_POLICY_META, ids=range(len(HOSTILE_POLICY_META)))
def test_hostile_policy_fields_are_refused(meta: dict[str, Any]) -> None:
    refuses(policy_from_bytes, sealed({"kind": "policy", "meta": meta, "arrays": []}))


def test_state_fields_must_have_their_declared_types() -> None:
    """A part whose header is well formed but whose fields are not the state's:
    missing, duplicated between meta and arrays, an array sent as meta, a wrong type."""
    from bandit_core.linear import LinearArmState

    good = LinearArmState.prior(2, 1.0)
    _, meta, arrays = unpack(good.to_bytes())
    entries = [[n, a.dtype.str, list(a.shape)] for n, a in arrays.items()]
    payload = b"".join(a.tobytes() for a in arrays.values())
    header = {"kind": "linear_arm", "meta": meta, "arrays": entries}
    assert LinearArmState.from_bytes(sealed(header, payload)).to_bytes() == good.to_bytes()
    for bad_meta in (
        {**meta, "n": "3"},
        {**meta, "n": True},
        {**meta, "n": 1.5},
        {**meta, "reward_sum": None},
        {k: v for k, v in meta.items() if k != "n"},
        {**meta, "A": [[1.0, 0.0], [0.0, 1.0]]},
    ):
        refuses(LinearArmState.from_bytes, sealed({**header, "meta": bad_meta}, payload))
    swapped = {"kind": "linear_arm", "meta": {**meta, "theta": [0.0, 0.0]}, "arrays": entries[:-1]}
    refuses(LinearArmState.from_bytes, sealed(swapped, payload[: -2 * 8]))


@pytest.mark.parametrize("name", NAMES)
def test_version_one_blobs_are_still_read_explicitly(name: str) -> None:
    """A blob written before the checksum (magic BCS1, no CRC field) loads to the same
    policy; the CRC field of a version-2 blob read as version 1 is refused."""
    blob = trained(name).to_bytes()
    _, meta, arrays = unpack(blob)
    v1_parts = []
    for i in range(len(meta["parts"])):
        part = arrays[f"p{i}"].tobytes()
        v1_parts.append(np.frombuffer(MAGIC_V1 + part[8:], np.uint8))
    entries = [[f"p{i}", "|u1", [len(p)]] for i, p in enumerate(v1_parts)]
    v1 = sealed(
        {"kind": "policy", "meta": meta, "arrays": entries},
        b"".join(p.tobytes() for p in v1_parts),
        MAGIC_V1,
    )
    assert policy_from_bytes(v1).to_bytes() == blob  # rewritten as version 2
    refuses(policy_from_bytes, MAGIC_V1 + blob[4:])
