"""Binary serialization of policy state, without pickle.

Layout of one serialized blob (all integers little-endian)::

    offset  size  field
    0       4     magic b"BCS1"
    4       4     uint32 H, length of the header
    8       H     header, UTF-8 JSON: {"kind": str, "meta": {...},
                  "arrays": [[name, dtype_str, shape], ...]}
    8+H     ...   the arrays' raw C-order bytes, concatenated in header order

Scalars (counts, sums, versions) travel in ``meta``; arrays travel raw, so decoding is
a few ``np.frombuffer`` views. ``kind`` names the state class and is checked on read.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from typing import Any, ClassVar, Self

import numpy as np

from bandit_core.errors import StateFormatError

MAGIC = b"BCS1"
_HEADER_LEN = struct.Struct("<I")


def _json_scalar(value: Any) -> Any:
    """numpy scalars in ``meta`` (an ``np.int64`` count, say) travel as Python numbers."""
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    raise TypeError(f"meta values must be JSON-able, but got {type(value).__name__}")


def pack(kind: str, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> bytes:
    """Serialize ``meta`` (JSON-able) and named arrays into one blob (layout above)."""
    # np.asarray(order="C"), not np.ascontiguousarray: the latter turns 0-d arrays into shape (1,).
    contiguous = {name: np.asarray(a, order="C") for name, a in arrays.items()}
    header = json.dumps(
        {
            "kind": kind,
            "meta": meta,
            "arrays": [[n, a.dtype.str, list(a.shape)] for n, a in contiguous.items()],
        },
        separators=(",", ":"),
        default=_json_scalar,
    ).encode()
    return b"".join(
        [MAGIC, _HEADER_LEN.pack(len(header)), header]
        + [a.tobytes() for a in contiguous.values()]
    )


def unpack(data: bytes, kind: str | None = None) -> tuple[str, dict[str, Any], dict[str, np.ndarray]]:
    """Inverse of :func:`pack`; returns ``(kind, meta, arrays)``.

    Arrays are writable copies, so callers may update them in place.

    >>> k, meta, arrays = unpack(pack("demo", {"n": 2}, {"b": np.arange(3.0)}))
    >>> k, meta, arrays["b"].tolist()
    ('demo', {'n': 2}, [0.0, 1.0, 2.0])
    """
    if not isinstance(data, (bytes, bytearray, memoryview)) or bytes(data[:4]) != MAGIC:
        raise StateFormatError("state bytes must start with the magic b'BCS1'")
    try:
        (header_len,) = _HEADER_LEN.unpack_from(data, 4)
        header = json.loads(bytes(data[8 : 8 + header_len]))
        found_kind, meta = header["kind"], header["meta"]
        if not isinstance(found_kind, str) or not isinstance(meta, dict):
            raise StateFormatError("state header must hold a str 'kind' and a dict 'meta'")
        offset = 8 + header_len
        arrays: dict[str, np.ndarray] = {}
        for name, dtype_str, shape in header["arrays"]:
            dtype = np.dtype(dtype_str)
            if dtype.hasobject:
                raise StateFormatError(f"array {name!r} has an object dtype")
            count = int(np.prod(shape, dtype=np.int64))
            size = count * dtype.itemsize
            if offset + size > len(data):
                raise StateFormatError(f"state bytes end inside array {name!r}")
            arrays[name] = np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape).copy()
            offset += size
    except (struct.error, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, StateFormatError):
            raise
        raise StateFormatError(f"state bytes are corrupt: {exc}") from exc
    if offset != len(data):
        raise StateFormatError(f"state bytes have {len(data) - offset} trailing bytes")
    if kind is not None and found_kind != kind:
        raise StateFormatError(f"expected a {kind!r} state, but got a {found_kind!r} state")
    return found_kind, meta, arrays


class ArrayState:
    """Mixin for dataclass states: ndarray fields travel as arrays, the rest in meta.

    Subclasses are ``@dataclass`` classes whose fields are numpy arrays or JSON-able
    scalars. ``KIND`` names the class in the blob.

    >>> @dataclasses.dataclass
    ... class Demo(ArrayState):
    ...     KIND: ClassVar[str] = "demo"
    ...     b: np.ndarray
    ...     n: int = 0
    >>> Demo.from_bytes(Demo(np.ones(2), 3).to_bytes())
    Demo(b=array([1., 1.]), n=3)
    """

    KIND: ClassVar[str] = ""

    def to_bytes(self) -> bytes:
        """Serialize this state (layout in the module docstring)."""
        meta: dict[str, Any] = {}
        arrays: dict[str, np.ndarray] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray):
                arrays[f.name] = value
            else:
                meta[f.name] = value
        return pack(self.KIND, meta, arrays)

    @classmethod
    def from_bytes(cls, data: bytes) -> Self:
        """Inverse of :meth:`to_bytes`; raises :class:`StateFormatError` on a mismatch."""
        _, meta, arrays = unpack(data, cls.KIND)
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        if set(meta) | set(arrays) != names:
            raise StateFormatError(
                f"{cls.KIND!r} state must have fields {sorted(names)}, "
                f"but got {sorted(set(meta) | set(arrays))}"
            )
        return cls(**meta, **arrays)
