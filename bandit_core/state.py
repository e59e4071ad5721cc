"""Binary serialization of policy state, without pickle.

Layout of one serialized blob, format version 2 (all integers little-endian)::

    offset  size  field
    0       4     magic b"BCS2"
    4       4     uint32 CRC-32 (zlib.crc32) of every byte from offset 8 to the end
    8       4     uint32 H, length of the header
    12      H     header, UTF-8 JSON: {"kind": str, "meta": {...},
                  "arrays": [[name, dtype_str, shape], ...]}
    12+H    ...   the arrays' raw C-order bytes, concatenated in header order

Scalars (counts, sums, versions) travel in ``meta``; arrays travel raw, so decoding is
a few ``np.frombuffer`` views. ``kind`` names the state class and is checked on read.

Reading checks, in order, before anything is used: the magic, the checksum (so a
flipped, inserted or dropped byte anywhere is refused, with probability 1 - 2^-32 for
damage CRC-32 does not catch by construction), the header length against the blob, then
every header field: ``kind`` a str, ``meta`` a dict, ``arrays`` a list of
``[name, dtype, shape]`` with a unique str name, a fixed-size numeric or bool dtype
written with its byte order, and a shape of at most :data:`MAX_NDIM` non-negative ints
whose bytes lie inside the blob, ending exactly at its end. Any failure raises
:class:`~bandit_core.errors.StateFormatError`, never another exception.

Version 1 (magic ``b"BCS1"``, the same layout without the checksum field) is still
read, explicitly: blobs written before the checksum existed (Redis state parts,
snapshots in the event log, exported snapshots) stay loadable after an upgrade, and the
next write of each part stores it as version 2. A version-1 blob gets every check above
but the checksum. :func:`pack` writes version 2 only.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import zlib
from typing import Any, ClassVar, Self

import numpy as np

from bandit_core.errors import StateFormatError

MAGIC = b"BCS2"
#: The version-1 magic: no checksum field, read for blobs written before version 2.
MAGIC_V1 = b"BCS1"
#: Most dimensions an array of a state may declare.
MAX_NDIM = 8
_UINT32 = struct.Struct("<I")
_ARRAY_KINDS = frozenset("biufc")  # bool, signed, unsigned, float, complex
#: The JSON types a meta field of each annotation may hold (bool only where annotated).
_META_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "str": (str,),
    "dict": (dict,),
}


def _json_scalar(value: Any) -> Any:
    """numpy scalars in ``meta`` (an ``np.int64`` count, say) travel as Python numbers."""
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    raise TypeError(f"meta values must be JSON-able, but got {type(value).__name__}")


def pack(kind: str, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> bytes:
    """Serialize ``meta`` (JSON-able) and named arrays into one version-2 blob (layout above)."""
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
    body = b"".join(
        [_UINT32.pack(len(header)), header] + [a.tobytes() for a in contiguous.values()]
    )
    return b"".join([MAGIC, _UINT32.pack(zlib.crc32(body)), body])


def _body(data: bytes | bytearray | memoryview) -> memoryview:
    """The blob after its magic (and checksum, which is verified): length + header + arrays."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise StateFormatError(f"state must be bytes, but got {type(data).__name__}")
    view = memoryview(data).cast("B")
    magic = bytes(view[:4])
    if magic == MAGIC:
        if len(view) < 12:
            raise StateFormatError(
                f"state bytes end inside the {len(view)}-byte preamble (12 bytes)"
            )
        (stored,) = _UINT32.unpack_from(view, 4)
        body = view[8:]
        if zlib.crc32(body) != stored:
            raise StateFormatError("state bytes fail their CRC-32 checksum: corrupted or truncated")
        return body
    if magic == MAGIC_V1:
        return view[4:]
    raise StateFormatError(
        f"state bytes must start with the magic {MAGIC!r} (or {MAGIC_V1!r}), but got {magic!r}"
    )


def _array_spec(entry: Any, seen: set[str]) -> tuple[str, np.dtype, tuple[int, ...], int]:
    """``(name, dtype, shape, byte size)`` of one checked ``[name, dtype, shape]`` header entry."""
    if not (isinstance(entry, list) and len(entry) == 3):
        raise StateFormatError(
            f"every header array must be [name, dtype, shape], but got {entry!r}"
        )
    name, dtype_str, shape = entry
    if not isinstance(name, str) or name in seen:
        raise StateFormatError(f"header array names must be unique strs, but got {name!r}")
    if not isinstance(dtype_str, str) or dtype_str[:1] not in ("<", ">", "|"):
        raise StateFormatError(
            f"array {name!r} needs a dtype with its byte order, but got {dtype_str!r}"
        )
    try:
        dtype = np.dtype(dtype_str)
    except TypeError:
        raise StateFormatError(f"array {name!r} has the unknown dtype {dtype_str!r}") from None
    if dtype.kind not in _ARRAY_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise StateFormatError(
            f"array {name!r} must have a numeric or bool dtype, but got {dtype_str!r}"
        )
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_NDIM
        or not all(type(n) is int and n >= 0 for n in shape)
    ):
        raise StateFormatError(
            f"array {name!r} needs a shape of at most {MAX_NDIM} non-negative ints, but got {shape!r}"
        )
    count = 1
    for n in shape:  # Python ints: a huge declared shape cannot wrap around
        count *= n
    return name, dtype, tuple(shape), count * dtype.itemsize


def unpack(
    data: bytes, kind: str | None = None
) -> tuple[str, dict[str, Any], dict[str, np.ndarray]]:
    """Inverse of :func:`pack`; returns ``(kind, meta, arrays)``.

    Arrays are writable copies, so callers may update them in place. Every check of the
    module docstring runs first; any failure raises :class:`StateFormatError`.

    >>> k, meta, arrays = unpack(pack("demo", {"n": 2}, {"b": np.arange(3.0)}))
    >>> k, meta, arrays["b"].tolist()
    ('demo', {'n': 2}, [0.0, 1.0, 2.0])
    """
    body = _body(data)
    if len(body) < 4:
        raise StateFormatError("state bytes end before the header length")
    (header_len,) = _UINT32.unpack_from(body, 0)
    if 4 + header_len > len(body):
        raise StateFormatError(
            f"the header declares {header_len} bytes, but only {len(body) - 4} follow"
        )
    try:
        header = json.loads(bytes(body[4 : 4 + header_len]))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise StateFormatError(f"the state header is not JSON: {exc}") from None
    if not (isinstance(header, dict) and set(header) == {"kind", "meta", "arrays"}):
        raise StateFormatError(
            "the state header must be an object with exactly 'kind', 'meta' and 'arrays'"
        )
    found_kind, meta, entries = header["kind"], header["meta"], header["arrays"]
    if (
        not isinstance(found_kind, str)
        or not isinstance(meta, dict)
        or not isinstance(entries, list)
    ):
        raise StateFormatError(
            "the state header needs a str 'kind', a dict 'meta' and a list 'arrays'"
        )
    if kind is not None and found_kind != kind:
        raise StateFormatError(f"expected a {kind!r} state, but got a {found_kind!r} state")
    offset = 4 + header_len
    arrays: dict[str, np.ndarray] = {}
    for entry in entries:
        name, dtype, shape, size = _array_spec(entry, set(arrays))
        if offset + size > len(body):
            raise StateFormatError(
                f"state bytes end inside array {name!r} (declared shape {list(shape)})"
            )
        count = size // dtype.itemsize
        arrays[name] = (
            np.frombuffer(body, dtype=dtype, count=count, offset=offset).reshape(shape).copy()
        )
        offset += size
    if offset != len(body):
        raise StateFormatError(f"state bytes have {len(body) - offset} trailing bytes")
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
    # Declared for the type checker only: every subclass is a dataclass.
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def to_bytes(self) -> bytes:
        """Serialize this state (layout in the module docstring)."""
        meta: dict[str, Any] = {}
        arrays: dict[str, np.ndarray] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, np.ndarray):
                arrays[f.name] = value
            else:
                meta[f.name] = value
        return pack(self.KIND, meta, arrays)

    @classmethod
    def from_bytes(cls, data: bytes) -> Self:
        """Inverse of :meth:`to_bytes`; raises :class:`StateFormatError` on a mismatch.

        Every field must be present once: those annotated ``np.ndarray`` as arrays, the
        others in ``meta`` with a value of their annotated type (``int``, ``float``,
        ``bool``, ``str``, ``dict``; an ``int`` for a ``float`` field is accepted).
        """
        _, meta, arrays = unpack(data, cls.KIND)
        names = {f.name for f in dataclasses.fields(cls)}
        if set(meta) | set(arrays) != names or not set(meta).isdisjoint(arrays):
            raise StateFormatError(
                f"{cls.KIND!r} state must have fields {sorted(names)} once each, "
                f"but got {sorted(meta)} in meta and {sorted(arrays)} as arrays"
            )
        for f in dataclasses.fields(cls):
            annotation = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
            is_array = annotation in ("np.ndarray", "ndarray")
            if is_array != (f.name in arrays):
                raise StateFormatError(
                    f"{cls.KIND!r} field {f.name!r} must travel as {'an array' if is_array else 'a meta value'}"
                )
            expected = _META_TYPES.get(annotation.split("[", 1)[0])
            value = meta.get(f.name)
            if (
                expected is not None
                and not is_array
                and (
                    not isinstance(value, expected)
                    or (isinstance(value, bool) and bool not in expected)
                )
            ):
                raise StateFormatError(
                    f"{cls.KIND!r} field {f.name!r} must be {annotation}, but got {value!r}"
                )
        return cls(**meta, **arrays)
