"""attnbias: the Python client of the attnbias HTTP service.

Position encodings, RoPE tables, attention-bias tables and fused attention,
computed by an ``attnbiasd`` server, as numpy arrays -- and pictures of them::

    import numpy as np
    import attnbias

    ab = attnbias.Client("http://127.0.0.1:8080")
    pe = ab.encodings("sinusoidal", positions=128, dim=64)         # (128, 64)
    b = ab.bias("alibi", num_heads=8, q_len=32, causal=True)       # (8, 32, 32)
    fig = attnbias.plot_bias(b, heads=[0, 3, 7])                    # a Figure
    fig.savefig("alibi.png")

What comes back:
  * a route with one output returns that numpy array; several outputs come
    back as a dict of arrays (``rope`` tables: ``inv_freq``, ``cos``,
    ``sin`` and the float ``attention_scaling``;
    ``attention(..., returns=["output", "lse", "weights"])``); scalar
    outputs are Python floats.
  * Arrays are float32 unless ``output_dtype`` says ``"float64"`` or
    ``"float16"``; ``"bfloat16"`` answers (numpy has no such dtype) come
    back as float32 arrays (exact), or as their uint16 bit patterns with
    ``Client(bfloat16="uint16")``.  T5 ``buckets`` are int32.

How it travels:
  numpy inputs (``q``, ``k``, ``v``, ``x``, ``table``, ``attn_bias``, FIRE
  layers) go as base64 inside JSON while they are small, and as one
  safetensors body (every other field in its ``__metadata__["params"]``)
  once their total size passes ``binary_threshold`` (64 KiB).  float16,
  float32 and float64 arrays keep their dtype on the wire, bfloat16 data
  (:class:`BFloat16`) too; other dtypes are sent as float32.  Answers are
  asked for as safetensors, so results arrive bit for bit.

Errors: any non-2xx answer raises :class:`AttnbiasError` with the server's
problem details (``status``, ``type``, ``title``, ``detail``, ``field`` --
a JSON Pointer to the culprit -- and ``retry_after`` for 503).  A 503 with
``Retry-After`` (a full queue) is retried first, with backoff.  Fields the
server did not use raise an :class:`IgnoredFieldsWarning`.

Model configs: every compute method takes ``model=`` (a preset of
``Client.models()``), ``config=`` (a Hugging Face ``config.json`` dict) and
``layer=``; ``Client.last_config`` (a :class:`ConfigUsed`) then says which
config keys the answer used, the upstream steps it did not apply and the
layer it computed.

The plotting helpers (:func:`plot_bias`, :func:`plot_attention`,
:func:`plot_rope`, :func:`plot_analysis`) need matplotlib, imported on
their first use only.

A Client keeps one HTTP/1.1 connection open; use one Client per thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._client import AttnbiasError, Client, ConfigUsed, IgnoredFieldsWarning, __version__
from ._wire import BFloat16, safetensors_dumps, safetensors_loads

if TYPE_CHECKING:  # for type checkers; at run time __getattr__ imports them
    from .plotting import plot_analysis, plot_attention, plot_bias, plot_rope

__all__ = ["Client", "AttnbiasError", "IgnoredFieldsWarning", "ConfigUsed", "BFloat16",
           "safetensors_dumps", "safetensors_loads", "plot_bias",
           "plot_attention", "plot_rope", "plot_analysis", "__version__"]

_PLOTTING = ("plot_bias", "plot_attention", "plot_rope", "plot_analysis")


def __getattr__(name: str) -> Any:
    """The plotting helpers, imported (with matplotlib) on first use."""
    if name in _PLOTTING:
        from . import plotting
        return getattr(plotting, name)
    raise AttributeError("module 'attnbias' has no attribute %r" % name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_PLOTTING))
