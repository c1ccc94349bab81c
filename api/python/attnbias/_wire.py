"""How arrays travel: safetensors files, the API's JSON tensor forms, and
the numpy dtypes of both directions.

numpy has no bfloat16 dtype (Debian's numpy, at least), so bfloat16 data
comes back either widened to float32 -- exact, every bfloat16 is a float32
-- or as its raw 16-bit patterns in a uint16 array, as the caller chooses
(``bfloat16="float32"`` or ``"uint16"``).  To send bfloat16 data, wrap its
bit patterns in :class:`BFloat16`, or pass an array whose dtype is named
``bfloat16`` (the ``ml_dtypes`` package's, which JAX and others use).
"""

from __future__ import annotations

import base64
import json
import math
import struct
from typing import Any, Dict, List, Literal, Mapping, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

__all__ = ["BFloat16", "safetensors_dumps", "safetensors_loads"]

Array = npt.NDArray[Any]
#: What a caller asks bfloat16 answers to become.
BF16Mode = Literal["float32", "uint16"]

# numpy dtype <-> the safetensors names.  The API reads F32, F64, F16, BF16
# and I32; the other integer types are here so that files written by other
# tools load.
_ST_DTYPE: Dict[str, np.dtype[Any]] = {
    "F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "F16": np.dtype("<f2"),
    "I32": np.dtype("<i4"), "I64": np.dtype("<i8"), "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"), "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}
_ST_NAME: Dict[np.dtype[Any], str] = {
    np.dtype(np.float32): "F32", np.dtype(np.float64): "F64",
    np.dtype(np.float16): "F16", np.dtype(np.int32): "I32",
    np.dtype(np.int64): "I64", np.dtype(np.int16): "I16",
    np.dtype(np.int8): "I8", np.dtype(np.uint8): "U8", np.dtype(np.bool_): "BOOL",
}
# The API's dtype names of the float dtypes numpy has.
_API_NAME: Dict[np.dtype[Any], str] = {
    np.dtype(np.float32): "float32", np.dtype(np.float64): "float64",
    np.dtype(np.float16): "float16",
}
_JSON_DTYPE: Dict[str, np.dtype[Any]] = {
    "float32": np.dtype("<f4"), "float64": np.dtype("<f8"),
    "float16": np.dtype("<f2"), "int32": np.dtype("<i4"),
}


class BFloat16:
    """bfloat16 data given as its raw bit patterns (a uint16 array).

    ``BFloat16(bits)`` sends ``bits`` as a bfloat16 tensor; ``BFloat16.
    from_float32(x)`` rounds float32 values to the nearest bfloat16 (ties
    to even, as PyTorch's ``.to(torch.bfloat16)``) first.
    """

    __slots__ = ("bits",)

    def __init__(self, bits: npt.ArrayLike) -> None:
        arr = np.asarray(bits)
        if arr.dtype != np.uint16:
            raise TypeError("BFloat16 takes uint16 bit patterns, not %s" % arr.dtype)
        self.bits: npt.NDArray[np.uint16] = np.ascontiguousarray(arr)

    @classmethod
    def from_float32(cls, values: npt.ArrayLike) -> "BFloat16":
        """Round float32 values to bfloat16 (nearest, ties to even; NaN kept)."""
        f = np.ascontiguousarray(np.asarray(values, dtype=np.float32))
        u = f.view(np.uint32).astype(np.uint64)
        rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        nan = np.isnan(f)
        rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)  # stay NaN
        return cls(rounded)

    def to_float32(self) -> npt.NDArray[np.float32]:
        """The values, widened exactly to float32."""
        return bf16_bits_to_f32(self.bits)

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self.bits.shape)

    @property
    def nbytes(self) -> int:
        return int(self.bits.nbytes)

    def __repr__(self) -> str:
        return "BFloat16(shape=%s)" % (self.shape,)


#: An input tensor as it goes on the wire: a numpy array of a float dtype
#: the API keeps, or bfloat16 bits.
WireTensor = Union[Array, BFloat16]


def bf16_bits_to_f32(bits: npt.NDArray[np.uint16]) -> npt.NDArray[np.float32]:
    """Raw bfloat16 patterns -> float32 (exact: the top half of a float32)."""
    u32 = np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16
    return u32.view(np.float32)


def _bf16_from_bytes(raw: bytes, shape: Tuple[int, ...], mode: BF16Mode) -> Array:
    bits = np.frombuffer(raw, dtype="<u2").reshape(shape).astype(np.uint16)
    if mode == "uint16":
        return bits
    return bf16_bits_to_f32(bits)


def as_wire_tensor(value: Any) -> WireTensor:
    """An input tensor in a dtype the wire keeps, C-ordered.

    float16/float32/float64 arrays keep their dtype; bfloat16 (BFloat16 bits,
    or an array whose dtype is named ``bfloat16``) stays bfloat16; anything
    else -- lists, integer and bool arrays -- becomes float32, the API's
    default.
    """
    if isinstance(value, BFloat16):
        return value
    arr = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=np.float32)
    if arr.dtype.name == "bfloat16" and arr.dtype.itemsize == 2:
        return BFloat16(np.ascontiguousarray(arr).view(np.uint16))
    if arr.dtype not in _API_NAME:
        arr = arr.astype(np.float32)
    return np.ascontiguousarray(arr)


def _le_bytes(arr: Array) -> bytes:
    return np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()


def b64_tensor(t: WireTensor) -> Dict[str, Any]:
    """The API's base64 JSON form of an input tensor."""
    if isinstance(t, BFloat16):
        raw, dtype = _le_bytes(t.bits), "bfloat16"
    else:
        raw, dtype = _le_bytes(t), _API_NAME[t.dtype]
    return {"shape": list(t.shape), "dtype": dtype,
            "b64": base64.b64encode(raw).decode("ascii")}


# ---------------------------------------------------------------------------
# safetensors
# ---------------------------------------------------------------------------

def safetensors_dumps(tensors: Mapping[str, Union[npt.ArrayLike, BFloat16]],
                      metadata: Optional[Mapping[str, Any]] = None) -> bytes:
    """Serialise ``{name: array}`` (and string ``metadata``) to bytes.

    Arrays are written little-endian in C order, back to back in the order
    given (the format allows no holes); :class:`BFloat16` values as BF16.
    The JSON header is padded with spaces to a multiple of 8 bytes, as the
    reference implementation does.
    """
    header: Dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs: List[bytes] = []
    offset = 0
    for name, value in tensors.items():
        if isinstance(value, BFloat16):
            raw, dt, shape = _le_bytes(value.bits), "BF16", list(value.shape)
        else:
            arr = np.asarray(value)
            if arr.dtype not in _ST_NAME:
                raise TypeError("safetensors: unsupported dtype %s for %r" % (arr.dtype, name))
            raw, dt, shape = _le_bytes(arr), _ST_NAME[arr.dtype], list(arr.shape)
        header[name] = {"dtype": dt, "shape": shape,
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-len(text)) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def safetensors_loads(data: bytes, bfloat16: BF16Mode = "float32"
                      ) -> Tuple[Dict[str, Array], Dict[str, str]]:
    """Parse safetensors bytes into ``({name: ndarray}, metadata)``.

    BF16 tensors become float32 arrays, or their uint16 bit patterns with
    ``bfloat16="uint16"``.  Raises ValueError on a malformed file.
    """
    view = memoryview(data)
    if len(view) < 8:
        raise ValueError("safetensors: shorter than its 8-byte header length")
    (hlen,) = struct.unpack("<Q", view[:8])
    if hlen > len(view) - 8:
        raise ValueError("safetensors: header length %d exceeds the file" % hlen)
    header = json.loads(bytes(view[8:8 + hlen]).decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("safetensors: header is not a JSON object")
    base = 8 + hlen
    meta = header.pop("__metadata__", None) or {}
    out: Dict[str, Array] = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        shape = tuple(int(s) for s in info["shape"])
        if not 0 <= b <= e <= len(view) - base:
            raise ValueError("safetensors: %r offsets [%d, %d] outside the data" % (name, b, e))
        raw = bytes(view[base + b:base + e])
        dt = info["dtype"]
        if dt == "BF16":
            out[name] = _bf16_from_bytes(raw, shape, bfloat16)
        elif dt in _ST_DTYPE:
            arr = np.frombuffer(raw, dtype=_ST_DTYPE[dt]).reshape(shape)
            out[name] = arr.astype(arr.dtype.newbyteorder("="), copy=True)
        else:
            raise ValueError("safetensors: unsupported dtype %r for %r" % (dt, name))
    return out, {str(k): str(v) for k, v in meta.items()}


# ---------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------

def jsonable(obj: Any) -> Any:
    """numpy values and non-finite floats as the API's JSON spells them
    (JSON has no infinities: ``"inf"``, ``"-inf"``, ``"nan"``)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return jsonable(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj


def _float_list(values: Any) -> npt.NDArray[np.float64]:
    """A JSON data list (numbers and "inf"/"-inf"/"nan" strings) -> float64."""
    try:
        return np.asarray(values, dtype=np.float64)
    except (ValueError, TypeError):
        return np.array([float(v) for v in values], dtype=np.float64)


def decode_json_tensor(obj: Mapping[str, Any], bfloat16: BF16Mode = "float32") -> Array:
    """A tensor of a JSON answer (``data`` or ``b64``) as a numpy array."""
    shape = tuple(int(s) for s in obj["shape"])
    dtype = obj.get("dtype", "float32")
    if "b64" in obj:
        raw = base64.b64decode(obj["b64"])
        if dtype == "bfloat16":
            return _bf16_from_bytes(raw, shape, bfloat16)
        return np.frombuffer(raw, dtype=_JSON_DTYPE[dtype]).reshape(shape).copy()
    if dtype == "int32":
        return np.asarray(obj["data"], dtype=np.int32).reshape(shape)
    arr = _float_list(obj["data"]).reshape(shape)
    if dtype == "bfloat16":
        # The text is the value's shortest float32 form: exact in float32.
        f32 = arr.astype(np.float32)
        if bfloat16 == "uint16":
            return BFloat16.from_float32(f32).bits
        return f32
    return arr.astype(_JSON_DTYPE[dtype])


def decode_json_output(value: Any, bfloat16: BF16Mode = "float32") -> Any:
    """One member of a JSON answer: a tensor, a scalar, or left as it is."""
    if isinstance(value, dict) and "shape" in value and ("data" in value or "b64" in value):
        return decode_json_tensor(value, bfloat16)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        return float(value)
    return value


def decode_metadata_output(text: str) -> Any:
    """A safetensors ``__metadata__`` value of an answer: a scalar output
    (decimal text, or "inf"/"nan") as a float, a JSON-valued output (the
    planner's ``methods`` and ``configs`` of ``/v1/analysis``) decoded;
    None for anything else (not an output)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, (list, dict)) else None
