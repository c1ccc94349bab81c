"""attnbias_client: a small Python client for the attnbias HTTP service.

One file, standard library plus numpy.  Copy it next to your notebook, or put
``api/python`` on ``sys.path``::

    import numpy as np
    from attnbias_client import Client, AttnbiasError

    ab = Client()                                   # http://127.0.0.1:8080
    pe = ab.encodings("sinusoidal", positions=128, dim=512)      # [128, 512]
    t = ab.rope(head_dim=128, positions=4096, rope_theta=500000,
                rope_scaling={"rope_type": "llama3", "factor": 8,
                              "original_max_position_embeddings": 8192})
    t["cos"].shape, t["attention_scaling"]          # (4096, 128), 1.0
    alibi = ab.bias("alibi", num_heads=8, q_len=16, k_len=16, causal=True)
    q = np.random.randn(1, 8, 16, 64).astype(np.float32)
    out = ab.attention(q, q, q, causal=True, bias={"method": "alibi"})

What comes back:
  * a route with one output returns that numpy array;
  * several outputs come back as a dict of arrays (``rope`` tables:
    ``inv_freq``, ``cos``, ``sin`` and the float ``attention_scaling``;
    ``attention(..., returns=["output", "lse", "weights"])``);
  * scalar outputs are Python floats.
  Arrays are float32 unless you ask for ``output_dtype="float64"`` or
  ``"float16"``; ``"bfloat16"`` (which numpy lacks) is widened to float32.
  T5 ``buckets`` are int32.

How it travels:
  numpy inputs (``q``, ``k``, ``v``, ``x``, ``table``, ``attn_bias``, FIRE
  layers) go as base64 inside JSON while they are small, and as one
  safetensors body (every other field in its ``__metadata__["params"]``)
  once their total size passes ``binary_threshold`` (64 KiB).  float16 and
  float64 arrays keep their dtype on the wire; other dtypes are sent as
  float32.  Responses are asked for as safetensors, so results arrive bit
  for bit.  ``Client(transport="json")`` or ``transport="safetensors"``
  forces one path.

Errors: any non-2xx answer raises :class:`AttnbiasError` with the problem
details of the server (``status``, ``type``, ``title``, ``detail``, ``field``
-- a JSON Pointer to the culprit -- and ``retry_after`` for 503).

A Client keeps one HTTP/1.1 connection open; use one Client per thread.
``Client(unix_socket="/run/attnbias/attnbias.sock")`` talks to a server
started with ``--unix-socket`` on the same host (a 100 MB body arrives in
13-27 ms against 24-38 ms over loopback TCP, measured on a 2-core VM).
``Client("https://attnbias.example:8443", ca_file="ca.pem")`` talks to a
server started with ``--tls-cert``/``--tls-key``, verifying its certificate
against ``ca_file`` (default: the system's CAs).
"""

import base64
import http.client
import json
import math
import socket
import ssl
import struct
import urllib.parse

import numpy as np

__all__ = ["Client", "AttnbiasError", "safetensors_dumps", "safetensors_loads",
           "plot_analysis"]

__version__ = "0.1.0"

SAFETENSORS = "application/vnd.safetensors"
JSON = "application/json"

# Request fields that hold tensors: every other array-like is sent as a
# plain JSON list (positions, kv_lens, slopes, mrope_section, ...).
_TENSOR_FIELDS = frozenset(["q", "k", "v", "x", "table", "attn_bias"])

# numpy dtype <-> the names of the HTTP API and of safetensors.
_API_DTYPE = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64",
              np.dtype(np.float16): "float16"}
_ST_DTYPE = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"),
             "F16": np.dtype("<f2"), "I32": np.dtype("<i4"),
             "I64": np.dtype("<i8"), "I16": np.dtype("<i2"),
             "I8": np.dtype("i1"), "U8": np.dtype("u1"),
             "BOOL": np.dtype("?")}
_ST_NAME = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64",
            np.dtype(np.float16): "F16", np.dtype(np.int32): "I32",
            np.dtype(np.int64): "I64", np.dtype(np.int16): "I16",
            np.dtype(np.int8): "I8", np.dtype(np.uint8): "U8",
            np.dtype(np.bool_): "BOOL"}
_JSON_DTYPE = {"float32": np.dtype("<f4"), "float64": np.dtype("<f8"),
               "float16": np.dtype("<f2"), "int32": np.dtype("<i4")}


class AttnbiasError(Exception):
    """The server answered with an error (RFC 9457 problem details).

    Attributes:
        status: HTTP status (400, 401, 404, 405, 406, 413, 415, 503, ...).
        type: problem type URI, ``https://attnbias.dev/errors/<slug>``.
        title: short summary of the type ("Bad Request").
        detail: sentence naming the offending value.
        field: JSON Pointer into your request (``"/rope/rotary_dim"``), or
            None when no single field is to blame.
        retry_after: seconds to wait before retrying (503), else None.
        body: the decoded problem object (or the raw text).
    """

    def __init__(self, status, type=None, title=None, detail=None, field=None,
                 retry_after=None, body=None):
        self.status = status
        self.type = type
        self.title = title
        self.detail = detail
        self.field = field
        self.retry_after = retry_after
        self.body = body
        msg = "%s %s: %s" % (status, title or "", detail or "")
        if field:
            msg += " (field %s)" % field
        super().__init__(msg)


# ---------------------------------------------------------------------------
# safetensors
# ---------------------------------------------------------------------------

def safetensors_dumps(tensors, metadata=None):
    """Serialise ``{name: ndarray}`` (and string ``metadata``) to bytes.

    Arrays are written little-endian in C order, back to back in the order
    given (the format allows no holes); the JSON header is padded with spaces
    to a multiple of 8 bytes, as the reference implementation does.
    """
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs, offset = [], 0
    for name, arr in tensors.items():
        arr = np.asarray(arr)
        if arr.dtype not in _ST_NAME:
            raise TypeError("safetensors: unsupported dtype %s for %r"
                            % (arr.dtype, name))
        raw = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": _ST_NAME[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-len(text)) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def _bf16_to_f32(raw, shape):
    u16 = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
    return u16.view(np.float32).reshape(shape)


def safetensors_loads(data):
    """Parse safetensors bytes into ``({name: ndarray}, metadata_dict)``.

    BF16 tensors are widened to float32 (numpy has no bfloat16).  Raises
    ValueError on a malformed file.
    """
    data = memoryview(data)
    if len(data) < 8:
        raise ValueError("safetensors: shorter than its 8-byte header length")
    (hlen,) = struct.unpack("<Q", data[:8])
    if hlen > len(data) - 8:
        raise ValueError("safetensors: header length %d exceeds the file" % hlen)
    header = json.loads(bytes(data[8:8 + hlen]).decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError("safetensors: header is not a JSON object")
    base = 8 + hlen
    meta = header.pop("__metadata__", None) or {}
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        shape = tuple(int(s) for s in info["shape"])
        if not 0 <= b <= e <= len(data) - base:
            raise ValueError("safetensors: %r offsets [%d, %d] outside the data"
                             % (name, b, e))
        raw = bytes(data[base + b:base + e])
        dt = info["dtype"]
        if dt == "BF16":
            arr = _bf16_to_f32(raw, shape)
        elif dt in _ST_DTYPE:
            arr = np.frombuffer(raw, dtype=_ST_DTYPE[dt]).reshape(shape)
            arr = arr.astype(arr.dtype.newbyteorder("="), copy=True)
        else:
            raise ValueError("safetensors: unsupported dtype %r for %r" % (dt, name))
        out[name] = arr
    return out, meta


# ---------------------------------------------------------------------------
# JSON helpers
# ---------------------------------------------------------------------------

def _json_number(v):
    """JSON has no inf/nan: the API spells them as strings."""
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _jsonable(obj):
    """Turn numpy values and non-finite floats into what the API accepts."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())
    return _json_number(obj)


def _to_float_array(values):
    """A JSON data list (numbers and "inf"/"-inf"/"nan" strings) -> float64."""
    try:
        return np.asarray(values, dtype=np.float64)
    except (ValueError, TypeError):
        return np.array([float(v) for v in values], dtype=np.float64)


def _decode_json_tensor(obj):
    shape = tuple(obj["shape"])
    dtype = obj.get("dtype", "float32")
    if "b64" in obj:
        raw = base64.b64decode(obj["b64"])
        if dtype == "bfloat16":
            return _bf16_to_f32(raw, shape)
        return np.frombuffer(raw, dtype=_JSON_DTYPE[dtype]).reshape(shape).copy()
    if dtype == "int32":
        return np.asarray(obj["data"], dtype=np.int32).reshape(shape)
    arr = _to_float_array(obj["data"]).reshape(shape)
    return arr.astype(np.float32 if dtype == "bfloat16" else _JSON_DTYPE[dtype])


def _decode_json_output(v):
    """One member of a JSON response: a tensor, a scalar, or left as is."""
    if isinstance(v, dict) and "shape" in v and ("data" in v or "b64" in v):
        return _decode_json_tensor(v)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if v in ("inf", "-inf", "nan"):
        return float(v)
    return v


def _metadata_output(text):
    """A safetensors ``__metadata__`` value of an answer: a scalar output
    (decimal text, or "inf"/"nan") as a float, a JSON-valued output (the
    planner's ``methods`` and ``configs``) decoded, anything else as is."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        v = json.loads(text)
    except ValueError:
        return text
    return v if isinstance(v, (list, dict)) else text


def _as_tensor(value):
    """An input tensor as a C-ordered numpy array in a dtype the wire keeps.

    numpy float16/float32/float64 arrays keep their dtype; anything else
    (Python lists, integer or bool arrays) becomes float32, the API's default.
    """
    arr = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=np.float32)
    if arr.dtype not in _API_DTYPE:
        arr = arr.astype(np.float32)
    return np.ascontiguousarray(arr)


def _split_tensors(params):
    """Pull every tensor out of the request.

    Returns (params without tensor values, {dotted path: ndarray}).  Tensors
    are the fields of _TENSOR_FIELDS at the top level or inside "bias", and
    the weight/bias of FIRE layers; a value already in one of the API's JSON
    tensor forms (a dict with "shape") is left as it is.
    """
    tensors = {}

    def walk(obj, prefix, in_layers):
        out = {}
        for key, val in obj.items():
            path = prefix + key
            is_tensor_key = key in _TENSOR_FIELDS or (in_layers and key in ("weight", "bias"))
            if val is None:
                continue
            if is_tensor_key and not isinstance(val, dict):
                tensors[path] = _as_tensor(val)
            elif key == "layers" and isinstance(val, (list, tuple)):
                out[key] = [walk(layer, "%s.%d." % (path, i), True)
                            if isinstance(layer, dict) else layer
                            for i, layer in enumerate(val)]
            elif key == "bias" and isinstance(val, dict) and not in_layers:
                out[key] = walk(val, path + ".", False)
            else:
                out[key] = val
        return out

    return walk(params, "", False), tensors


def _set_path(obj, path, value):
    """Put value at a dotted path ("bias.layers.0.weight") inside obj."""
    parts = path.split(".")
    for i, part in enumerate(parts[:-1]):
        nxt = parts[i + 1]
        if isinstance(obj, list):
            obj = obj[int(part)]
            continue
        if part not in obj:
            obj[part] = [] if nxt.isdigit() else {}
        obj = obj[part]
    last = parts[-1]
    if isinstance(obj, list):
        obj[int(last)] = value
    else:
        obj[last] = value


def _b64_tensor(arr):
    raw = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
    return {"shape": list(arr.shape), "dtype": _API_DTYPE[arr.dtype],
            "b64": base64.b64encode(raw).decode("ascii")}


def _rope_fields(config):
    """The fields /v1/rope reads, picked from a Hugging Face config dict."""
    keys = ("head_dim", "rope_theta", "partial_rotary_factor", "rotary_dim",
            "rope_scaling", "max_position_embeddings",
            "original_max_position_embeddings")
    out = {k: config[k] for k in keys if config.get(k) is not None}
    if "head_dim" not in out and config.get("hidden_size") and config.get("num_attention_heads"):
        out["head_dim"] = int(config["hidden_size"]) // int(config["num_attention_heads"])
    return out


# ---------------------------------------------------------------------------
# the client
# ---------------------------------------------------------------------------

class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a Unix-domain stream socket (a server run with
    ``--unix-socket``); the URL's host only fills the Host header."""

    def __init__(self, host, path, timeout):
        super().__init__(host, timeout=timeout)
        self._unix_path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._unix_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class Client:
    """A connection to an attnbias server.

    Args:
        url: base URL of the server, e.g. ``"http://127.0.0.1:8080"``.
        api_key: the key when the server runs with ``--api-key-file``
            (sent as ``Authorization: Bearer <key>``).
        timeout: seconds to wait for connecting and for each read.
        transport: ``"auto"`` (JSON with base64 tensors while the tensors
            total at most ``binary_threshold`` bytes, a safetensors body
            above), ``"json"`` or ``"safetensors"``.
        binary_threshold: the switch-over size of ``"auto"``, in bytes.
        accept: response format, ``"safetensors"`` (default) or ``"json"``
            (then base64 tensors, also exact).
        unix_socket: path of the server's ``--unix-socket``; the requests
            go there (plain HTTP), and ``url`` only names the Host header
            and a path prefix.
        ca_file: for an ``https://`` URL, a PEM file of the CA(s) that the
            server's certificate must chain to (for a self-signed server,
            its certificate itself); default: the system's CAs.  The
            certificate must also name the URL's host.
        ssl_context: an :class:`ssl.SSLContext` of your own for
            ``https://`` (client certificates, pinning), instead of
            ``ca_file``.
    """

    def __init__(self, url="http://127.0.0.1:8080", api_key=None, timeout=120.0,
                 transport="auto", binary_threshold=64 * 1024,
                 accept="safetensors", unix_socket=None, ca_file=None,
                 ssl_context=None):
        if unix_socket is not None and url == "http://127.0.0.1:8080":
            url = "http://localhost"
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError("url must start with http:// or https://, not %r" % url)
        if unix_socket is not None and parts.scheme != "http":
            raise ValueError("a unix_socket takes plain http:// URLs, not %r" % url)
        if (ca_file is not None or ssl_context is not None) and parts.scheme != "https":
            raise ValueError("ca_file and ssl_context are for https:// URLs, not %r" % url)
        if ca_file is not None and ssl_context is not None:
            raise ValueError("give ca_file or ssl_context, not both")
        if transport not in ("auto", "json", "safetensors"):
            raise ValueError("transport must be auto, json or safetensors")
        if accept not in ("safetensors", "json"):
            raise ValueError("accept must be safetensors or json")
        self.url = url.rstrip("/")
        self._scheme = parts.scheme
        self._netloc = parts.netloc
        self._prefix = parts.path.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.transport = transport
        self.binary_threshold = binary_threshold
        self.accept = accept
        self.unix_socket = unix_socket
        self.ca_file = ca_file
        self._ssl_context = ssl_context
        self._conn = None
        #: headers of the last response (e.g. ``X-Attnbias-Ignored``).
        self.last_headers = {}

    def __repr__(self):
        if self.unix_socket is not None:
            return "Client(%r, unix_socket=%r)" % (self.url, self.unix_socket)
        return "Client(%r)" % self.url

    @property
    def last_timing(self):
        """Where the last request's time went on the server, in ms, from its
        ``Server-Timing`` header: ``{"read": 21.3, "prepare": 0.1,
        "queue": 0.05, "compute": 176.2, "encode": 0.02}`` (the phases it
        went through).  An answer streamed while it was computed has
        ``"stream": True`` and no compute time; a large binary attention
        request that began computing while its body arrived has
        ``"early": (done, pieces)``, the pieces of its job done when the
        body ended.  Empty before any request."""
        out = {}
        for item in self.last_headers.get("server-timing", "").split(","):
            name, _, rest = item.strip().partition(";")
            if not name:
                continue
            params = dict(p.strip().partition("=")[::2] for p in rest.split(";") if "=" in p)
            try:
                if "dur" in params:
                    out[name] = float(params["dur"])
                elif name == "early" and "desc" in params:
                    done, _, pieces = params["desc"].strip('"').partition("/")
                    out[name] = (int(done), int(pieces))
                else:
                    out[name] = True
            except ValueError:
                out[name] = True
        return out

    # -- plumbing -----------------------------------------------------------

    def close(self):
        """Close the kept-alive connection (a later call reopens one)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _connection(self):
        if self._conn is None and self.unix_socket is not None:
            self._conn = _UnixHTTPConnection(self._netloc, self.unix_socket,
                                             self.timeout)
        elif self._conn is None and self._scheme == "https":
            if self._ssl_context is None:
                # TLS 1.2 or later, the certificate and the host name checked.
                self._ssl_context = ssl.create_default_context(cafile=self.ca_file)
            self._conn = http.client.HTTPSConnection(
                self._netloc, timeout=self.timeout, context=self._ssl_context)
        elif self._conn is None:
            self._conn = http.client.HTTPConnection(self._netloc, timeout=self.timeout)
        return self._conn

    def _send(self, method, path, body=None, headers=None):
        """One HTTP exchange; returns (status, headers dict, body bytes).

        A kept-alive connection the server closed meanwhile (idle timeout)
        is reopened once; every route is idempotent, so resending is safe.
        """
        hdrs = {"User-Agent": "attnbias-client/" + __version__}
        if self.api_key:
            hdrs["Authorization"] = "Bearer " + self.api_key
        hdrs.update(headers or {})
        for attempt in (0, 1):
            conn = self._connection()
            try:
                try:
                    conn.request(method, self._prefix + path, body=body,
                                 headers=hdrs)
                except (BrokenPipeError, ConnectionResetError):
                    # A body far over the server's cap is refused with its
                    # headers and the connection cut before the body is
                    # read: the answer (413) is waiting to be read.  On a
                    # connection closed while idle there is none, and
                    # getresponse raises what leads to the retry below.
                    pass
                resp = conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError,
                    BrokenPipeError, http.client.CannotSendRequest,
                    ssl.SSLEOFError, ssl.SSLZeroReturnError):
                self.close()
                if attempt:
                    raise
                continue
            headers_out = {k.lower(): v for k, v in resp.getheaders()}
            if headers_out.get("connection", "").lower() == "close":
                self.close()
            self.last_headers = headers_out
            return resp.status, headers_out, data
        raise AssertionError("unreachable")

    @staticmethod
    def _raise_problem(status, headers, data):
        try:
            prob = json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            prob = None
        retry = headers.get("retry-after")
        retry = int(retry) if retry and retry.isdigit() else None
        if not isinstance(prob, dict):
            raise AttnbiasError(status, detail=data.decode("utf-8", "replace")[:500],
                                retry_after=retry, body=data)
        raise AttnbiasError(status, prob.get("type"), prob.get("title"),
                            prob.get("detail") or prob.get("error"),
                            prob.get("field"), retry, prob)

    def _get_json(self, path):
        status, headers, data = self._send("GET", path, headers={"Accept": JSON})
        if status // 100 != 2:
            self._raise_problem(status, headers, data)
        return json.loads(data.decode("utf-8"))

    def request(self, path, params, accept=None):
        """POST ``params`` to ``path`` and return the decoded outputs.

        The general form behind every compute method: ``params`` is the
        request object of the HTTP API (numpy arrays allowed anywhere a
        tensor goes).  Returns a dict ``{output name: ndarray or float}``.
        ``accept="image/png"`` (``/v1/bias``) returns the PNG bytes.
        """
        params, tensors = _split_tensors(_drop_none(params))
        params = _jsonable(params)
        nbytes = sum(t.nbytes for t in tensors.values())
        binary = (self.transport == "safetensors" or
                  (self.transport == "auto" and nbytes > self.binary_threshold))
        want_json = accept is None and self.accept == "json"
        if want_json:
            params.setdefault("encoding", "b64")
        if binary:
            body = safetensors_dumps(tensors, {"params": json.dumps(params)})
            ctype = SAFETENSORS
        else:
            for path_, arr in tensors.items():
                _set_path(params, path_, _b64_tensor(arr))
            body = json.dumps(params, separators=(",", ":"), allow_nan=False).encode("utf-8")
            ctype = JSON
        acc = accept or (JSON if want_json else SAFETENSORS)
        status, headers, data = self._send(
            "POST", path, body, {"Content-Type": ctype, "Accept": acc})
        if status // 100 != 2:
            self._raise_problem(status, headers, data)
        rtype = headers.get("content-type", "").split(";")[0].strip()
        if rtype == SAFETENSORS:
            arrays, meta = safetensors_loads(data)
            out = dict(arrays)
            for k, v in meta.items():
                out[k] = _metadata_output(v)
            return out
        if rtype in (JSON, "application/problem+json"):
            obj = json.loads(data.decode("utf-8"))
            return {k: _decode_json_output(v) for k, v in obj.items()}
        return data

    @staticmethod
    def _unwrap(outputs):
        return next(iter(outputs.values())) if len(outputs) == 1 else outputs

    # -- operations ---------------------------------------------------------

    def health(self):
        """``GET /healthz``: ``{"status": "ok"}`` while the server lives."""
        return self._get_json("/healthz")

    def ready(self):
        """``GET /readyz``: True when the server accepts work (False while draining)."""
        status, _, _ = self._send("GET", "/readyz")
        return status == 200

    def methods(self):
        """``GET /v1/methods``: the catalog of methods, RoPE types and their
        parameters (types, defaults, ranges, descriptions), as a dict."""
        return self._get_json("/v1/methods")

    def encodings(self, method="sinusoidal", positions=None, dim=None, *, x=None,
                  table=None, **params):
        """Absolute position encodings (``POST /v1/encodings``).

        Args:
            method: ``"sinusoidal"``, ``"learned"``, ``"integer"`` or ``"binary"``.
            positions: ``n`` for positions ``0..n-1``, or a list/array of
                positions.
            dim: encoding width (not needed for ``learned``).
            x: optional ``[..., n, dim]`` array; then the result is
                ``x + encoding``.
            table: ``learned``: the ``[rows, dim]`` embedding matrix.
            **params: ``base`` (10000), ``layout`` (``"interleaved"``,
                ``"concat"``, ``"tensor2tensor"``), ``offset`` (learned),
                ``normalize`` (integer), ``output_dtype``.

        Returns:
            ``[n, dim]`` array (or ``x + encoding``).

        Example::

            pe = ab.encodings("sinusoidal", positions=4, dim=8)
            pe[1, :2]      # sin(1), cos(1)
        """
        return self._unwrap(self.request("/v1/encodings", dict(
            method=method, positions=positions, dim=dim, x=x, table=table, **params)))

    def rope(self, positions=None, head_dim=None, *, q=None, k=None,
             config=None, **params):
        """Rotary position embedding (``POST /v1/rope``).

        Without ``q``/``k`` returns the tables as a dict: ``inv_freq``
        ``[rotary_dim/2]``, ``cos`` and ``sin`` ``[n, rotary_dim]`` (laid out
        for the pairing, multiplied by the attention factor) and the float
        ``attention_scaling``.  With ``q`` and/or ``k`` returns the rotated
        array (a dict ``{"q", "k"}`` when both are given).

        Args:
            positions: ``n`` (positions ``0..n-1``), a list of positions, or
                ``[3, n]`` t/h/w rows (multi-axis, with ``mrope_section``) /
                ``[2, n]`` row/column rows (``vision2d``).  May be left out
                with ``q``/``k``: then ``0..n-1`` along their sequence axis
                (``vision2d`` excepted).
            head_dim: channels per head.
            q, k: arrays whose sequence axis has length n (``layout``
                ``"bhsd"`` by default, ``"bshd"`` allowed; rank 2..4).
            config: a Hugging Face ``config.json`` dict; its ``rope_theta``,
                ``partial_rotary_factor``, ``rope_scaling``,
                ``max_position_embeddings`` and ``head_dim`` (or
                ``hidden_size / num_attention_heads``) are used unless given
                explicitly.
            **params: ``rope_theta``, ``partial_rotary_factor`` or
                ``rotary_dim``, ``interleaved`` (False: rotate-half as in HF
                Llama / GPT-NeoX; True: GPT-J pairs), ``seq_len``,
                ``max_position_embeddings``, ``rope_scaling`` (a dict with
                HF names: ``rope_type``, ``factor``, ...), ``layout``,
                ``output_dtype``.

        Example::

            import json
            cfg = json.load(open("Meta-Llama-3.1-8B/config.json"))
            t = ab.rope(positions=8192, config=cfg)
            q_rot = ab.rope(positions=16, head_dim=128, q=q)
        """
        fields = _rope_fields(config) if config else {}
        if head_dim is not None:
            fields["head_dim"] = head_dim
        fields.update(params)
        fields.update(positions=positions, q=q, k=k)
        return self._unwrap(self.request("/v1/rope", fields))

    def bias(self, method, num_heads, q_len, k_len=None, *, returns=None,
             **params):
        """Attention-bias table (``POST /v1/bias``): ``[num_heads, q_len, k_len]``.

        Query row ``r`` sits at position ``q_offset + r`` (default
        ``k_len - q_len``), key ``j`` at ``j``.

        Args:
            method: ``"alibi"``, ``"t5"``, ``"fire"``, ``"kerple"`` or ``"none"``.
            num_heads, q_len, k_len: table size (``k_len`` defaults to ``q_len``).
            returns: ``["bias"]`` (default), ``["buckets"]`` or both
                (T5 buckets are int32 ``[q_len, k_len]``); with both, a dict.
            **params: ``causal``, ``q_offset``, and the method's parameters:
                alibi ``max_bias`` / ``slopes``; t5 ``table``
                ``[num_buckets, num_heads]`` (not needed for
                ``returns=["buckets"]``: ``relative_attention_num_buckets``,
                default 32, sizes them), ``bidirectional``,
                ``relative_attention_max_distance``; fire ``c``, ``L``,
                ``eps``, ``layers=[{"weight": W, "bias": b}, ...]``; kerple
                ``variant`` (``"log"``/``"power"``), ``r1``, ``r2``.

        Example::

            b = ab.bias("alibi", num_heads=8, q_len=4, k_len=4, causal=True)
            b[0]           # -0.5 * |i - j| below the diagonal, -inf above
        """
        return self._unwrap(self.request("/v1/bias", dict(
            method=method, num_heads=num_heads, q_len=q_len,
            k_len=q_len if k_len is None else k_len,
            **({"return": list(returns)} if returns else {}), **params)))

    def bias_heatmap(self, method, num_heads, q_len, k_len=None, head=0, **params):
        """PNG picture of one head of a bias table (``Accept: image/png``).

        Returns the PNG bytes; in a notebook::

            from IPython.display import Image
            Image(ab.bias_heatmap("alibi", 8, 64, head=3, causal=True))
        """
        return self.request("/v1/bias", dict(
            method=method, num_heads=num_heads, q_len=q_len,
            k_len=q_len if k_len is None else k_len, head=head, **params),
            accept="image/png")

    def analysis(self, kind, seq_len, **params):
        """What a position encoding does at a length (``POST /v1/analysis``).

        Args:
            kind: ``"rope"`` (per frequency pair of a RoPE config: wavelengths
                before and after its scaling, turns within the trained
                length and within ``seq_len``, which pairs reach angles they
                never saw, the factor and band of each pair, RoFormer's
                decay), ``"bias"`` (per head of a bias family: ALiBi's
                slopes and reach, T5's buckets and where they begin, the
                bias against distance) or ``"extend"`` (the planner: the
                config fields of linear, NTK, dynamic NTK, YaRN and Llama 3
                scaling from the trained length to ``seq_len``, with every
                per-pair number of each, a row per method).
            seq_len: the length analysed (the target of ``"extend"``).
            **params: the RoPE fields of :meth:`rope` (``head_dim``,
                ``rope_theta``, ``max_position_embeddings`` -- the trained
                length --, ``rope_scaling``, ...) or the bias fields of
                :meth:`bias` (``method``, ``num_heads`` and the method's
                parameters); ``points`` (decay samples).

        Returns:
            a dict of arrays and numbers (``"methods"`` and ``"configs"`` of
            ``"extend"`` are a list and a dict).  :func:`plot_analysis` draws
            it.

        Example::

            a = ab.analysis("rope", 131072, head_dim=128, rope_theta=500000,
                            max_position_embeddings=131072,
                            rope_scaling={"rope_type": "llama3", "factor": 8,
                                          "original_max_position_embeddings": 8192})
            a["wavelength"][:3], a["seen"].sum()
            plan = ab.analysis("extend", 32768, head_dim=128,
                               max_position_embeddings=4096)
            plan["configs"]["yarn"]        # fields to paste into config.json
        """
        return self.request("/v1/analysis", dict(kind=kind, seq_len=seq_len, **params))

    def analysis_png(self, kind, seq_len, plot=None, **params):
        """The server's own plot of :meth:`analysis` (``Accept: image/png``):
        ``plot`` is ``"wavelength"``, ``"decay"``, ``"scale"`` (rope,
        extend), ``"bias"``, ``"reach"`` or ``"buckets"`` (bias).  PNG bytes."""
        return self.request("/v1/analysis", dict(kind=kind, seq_len=seq_len, plot=plot,
                                                 **params), accept="image/png")

    def attention(self, q, k, v, *, returns=None, **params):
        """Full attention (``POST /v1/attention``).

        Args:
            q: ``[B, Hq, Nq, D]`` (or ``[Hq, Nq, D]``, ``[Nq, D]``); with
                ``layout="bshd"``, ``[B, Nq, Hq, D]``.
            k, v: ``[B, Hkv, Nk, D]`` and ``[B, Hkv, Nk, Dv]``; ``Hq`` must
                be a multiple of ``Hkv`` (GQA / MQA).
            returns: the outputs to get, exactly: ``["output"]``
                (default), ``["lse"]`` (then the lse array alone), or
                several, e.g. ``["output", "lse", "weights"]`` (then a dict).
            **params: ``causal``, ``scale`` (default ``1/sqrt(D)``),
                ``q_offset`` (default ``Nk - Nq``, bottom-right), ``softcap``,
                ``window=[left, right]`` or ``sliding_window=W``,
                ``kv_lens=[...]``, ``attn_bias`` (array broadcastable to
                ``[B, Hq, Nq, Nk]``), ``bias={"method": "alibi", ...}``
                (position bias computed in the kernel),
                ``rope={"head_dim": D, "rope_theta": ..., ...}``,
                ``layout``, ``output_dtype``.

        Returns:
            the output array, or a dict with ``output``, ``lse``, ``weights``.

        Example::

            out = ab.attention(q, k, v, causal=True)
            r = ab.attention(q, k, v, causal=True, returns=["output", "lse"])
            r["lse"].shape     # [B, Hq, Nq]
        """
        return self._unwrap(self.request("/v1/attention", dict(
            q=q, k=k, v=v, **({"return": list(returns)} if returns else {}),
            **params)))


def _drop_none(params):
    """Arguments left at None are not sent (the server's default applies)."""
    return {k: v for k, v in params.items() if v is not None}


def plot_analysis(result, plot=None, figsize=(8, 4.5)):
    """A matplotlib Figure of a :meth:`Client.analysis` answer
    (``attnbias_plots.plot_analysis``; matplotlib is imported on first
    use)."""
    from attnbias_plots import plot_analysis as draw
    return draw(result, plot=plot, figsize=figsize)
