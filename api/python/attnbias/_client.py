"""The HTTP client: one :class:`Client` per server (and per thread)."""

from __future__ import annotations

import http.client
import json
import random
import socket
import ssl
import sys
import time
import urllib.parse
import warnings
from dataclasses import dataclass
from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional,
                    Sequence, Tuple, Union, cast)

from ._wire import (BF16Mode, WireTensor, as_wire_tensor, b64_tensor,
                    decode_json_output, decode_metadata_output, jsonable,
                    safetensors_dumps, safetensors_loads)

__all__ = ["Client", "AttnbiasError", "IgnoredFieldsWarning", "ConfigUsed"]

__version__ = "0.2.0"

SAFETENSORS = "application/vnd.safetensors"
JSON = "application/json"
PNG = "image/png"

#: What a compute route returns: one array, a float (a scalar output), or a
#: dict of them when there are several outputs.
Result = Any
Headers = Dict[str, str]

# Request fields that hold tensors: every other array-like is sent as a
# plain JSON list (positions, kv_lens, slopes, mrope_section, ...).
_TENSOR_FIELDS = frozenset(["q", "k", "v", "x", "table", "attn_bias"])


class AttnbiasError(Exception):
    """The server answered with an error (RFC 9457 problem details).

    Attributes:
        status: HTTP status (400, 401, 404, 405, 406, 413, 415, 503, ...).
        type: problem type URI, ``https://attnbias.dev/errors/<slug>``.
        title: short summary of the type ("Bad Request").
        detail: sentence naming the offending value.
        field: JSON Pointer into your request (``"/rope/rotary_dim"``), or
            None when no single field is to blame.
        retry_after: seconds the server asked to wait (503), else None.
        body: the decoded problem object (or the raw bytes).
    """

    def __init__(self, status: int, type: Optional[str] = None,
                 title: Optional[str] = None, detail: Optional[str] = None,
                 field: Optional[str] = None, retry_after: Optional[int] = None,
                 body: Any = None) -> None:
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


class IgnoredFieldsWarning(UserWarning):
    """The server did not use some fields of a request (its
    ``X-Attnbias-Ignored`` header): misspelt names, or fields of a newer
    API version.  ``fields`` lists them (dotted paths for nested ones)."""

    def __init__(self, path: str, fields: List[str]) -> None:
        self.path = path
        self.fields = fields
        super().__init__(
            "%s ignored %s: the answer was computed without %s (misspelt, or "
            "not known to this server; Client(strict=True) makes it an error)"
            % (path, ", ".join(fields), "it" if len(fields) == 1 else "them"))


@dataclass(frozen=True)
class ConfigUsed:
    """What the server made of a request's model config (``model=``,
    ``config=`` or Hugging Face names at the top level), from the answer's
    ``X-Attnbias-Config-*`` headers; :attr:`Client.last_config`.

    Attributes:
        used: the config keys whose values the answer used
            (``X-Attnbias-Config-Used``); ``model_type`` stands for the
            family's semantics and its configuration class's defaults.
        upstream: steps of the model the caller applies before q and k
            reach attnbias, which the answer did not apply
            (``X-Attnbias-Config-Upstream``: ``("q_norm", "k_norm")`` for
            Gemma 3, ``("kv_lora_rank", ...)`` for DeepSeek).
        layer: the layer computed (``X-Attnbias-Config-Layer``), or None.
        layer_type: ``"full_attention"`` or ``"sliding_attention"``, or None.
    """

    used: Tuple[str, ...] = ()
    upstream: Tuple[str, ...] = ()
    layer: Optional[int] = None
    layer_type: Optional[str] = None

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> Optional["ConfigUsed"]:
        """The answer's config headers (lower-case names), or None when it
        has none (a request without a config)."""
        names = ("x-attnbias-config-used", "x-attnbias-config-upstream",
                 "x-attnbias-config-layer")
        if not any(n in headers for n in names):
            return None

        def items(name: str) -> Tuple[str, ...]:
            return tuple(x.strip() for x in headers.get(name, "").split(",") if x.strip())

        layer: Optional[int] = None
        layer_type: Optional[str] = None
        head, _, rest = headers.get(names[2], "").partition(";")
        if head.strip().isdigit():
            layer = int(head.strip())
        for param in rest.split(";"):
            key, _, value = param.strip().partition("=")
            if key == "type" and value:
                layer_type = value.strip().strip('"')
        return cls(items(names[0]), items(names[1]), layer, layer_type)


def _caller_stacklevel() -> int:
    """The warnings stacklevel of the first frame outside this package, so
    that a warning points at the caller's line."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("attnbias"):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def _fields(named: Mapping[str, Any], params: Mapping[str, Any]) -> Dict[str, Any]:
    """A method's request fields: its named arguments left at None are not
    sent (the server's default applies); a keyword of ``**params`` given as
    None is sent as JSON null, which says "none" (``rope_scaling=None``
    removes a preset's scaling, ``rope=None`` in attention says q and k
    are already rotated)."""
    out = {k: v for k, v in named.items() if v is not None}
    out.update(params)
    return out


def _split_tensors(params: Mapping[str, Any]) -> Tuple[Dict[str, Any], Dict[str, WireTensor]]:
    """Pull every tensor out of the request.

    Returns (params without tensor values, {dotted path: tensor}).  Tensors
    are the fields of _TENSOR_FIELDS at the top level or inside "bias", and
    the weight/bias of FIRE layers; a value already in one of the API's JSON
    tensor forms (a dict with "shape") is left as it is.  "config" (a
    model's config.json) is never searched.
    """
    tensors: Dict[str, WireTensor] = {}

    def walk(obj: Mapping[str, Any], prefix: str, in_layers: bool) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for key, val in obj.items():
            path = prefix + key
            is_tensor = key in _TENSOR_FIELDS or (in_layers and key in ("weight", "bias"))
            if val is None:
                out[key] = None      # JSON null: the caller said "none"
                continue
            if is_tensor and not isinstance(val, dict):
                tensors[path] = as_wire_tensor(val)
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


def _set_path(obj: Any, path: str, value: Any) -> None:
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


def _parse_retry_after(value: Optional[str]) -> Optional[int]:
    """Retry-After in seconds (the server sends delta-seconds), or None."""
    if value and value.strip().isdigit():
        return int(value.strip())
    return None


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a Unix-domain stream socket (a server run with
    ``--unix-socket``); the URL's host only fills the Host header."""

    def __init__(self, host: str, path: str, timeout: Optional[float]) -> None:
        super().__init__(host, timeout=timeout)
        self._unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._unix_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


# Exceptions that mean "the kept-alive connection was closed meanwhile":
# the request is sent again once on a new connection.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
          http.client.CannotSendRequest, ssl.SSLEOFError, ssl.SSLZeroReturnError)


class Client:
    """A connection to an attnbias server.

    Args:
        url: base URL of the server: ``"http://127.0.0.1:8080"``, or
            ``"https://host:8443"`` for a server run with TLS.
        api_key: the key when the server runs with ``--api-key-file``
            (sent as ``Authorization: Bearer <key>``).
        timeout: seconds to wait for connecting and for each read or write
            on the socket; past it the call raises :class:`TimeoutError`.
        transport: ``"auto"`` (JSON with base64 tensors while the tensors
            total at most ``binary_threshold`` bytes, a safetensors body
            above), ``"json"`` or ``"safetensors"``.
        binary_threshold: the switch-over size of ``"auto"``, in bytes.
        accept: answer format, ``"safetensors"`` (default) or ``"json"``
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
        retries: how many times a request answered 503 *with* a
            ``Retry-After`` (the server's queue was full) is sent again.  A
            503 without it (the server is draining) is raised at once.
        backoff: the first wait between tries, in seconds; it doubles with
            each try, and is never shorter than ``Retry-After`` asks.
        max_retry_wait: the longest single wait; a ``Retry-After`` beyond
            it raises at once instead of sleeping that long.
        strict: send ``Prefer: handling=strict`` (RFC 7240): a server that
            honours it refuses fields it would not use (400) instead of
            ignoring them.  Either way, fields the server ignored raise an
            :class:`IgnoredFieldsWarning`.
        bfloat16: what bfloat16 answers (``output_dtype="bfloat16"``)
            become: ``"float32"`` arrays (exact) or ``"uint16"`` arrays of
            their raw bit patterns.
    """

    def __init__(self, url: str = "http://127.0.0.1:8080", api_key: Optional[str] = None,
                 timeout: float = 120.0, transport: str = "auto",
                 binary_threshold: int = 64 * 1024, accept: str = "safetensors",
                 unix_socket: Optional[str] = None, ca_file: Optional[str] = None,
                 ssl_context: Optional[ssl.SSLContext] = None, *, retries: int = 3,
                 backoff: float = 0.5, max_retry_wait: float = 60.0,
                 strict: bool = False, bfloat16: BF16Mode = "float32") -> None:
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
        if bfloat16 not in ("float32", "uint16"):
            raise ValueError("bfloat16 must be float32 or uint16")
        if retries < 0 or backoff < 0 or max_retry_wait < 0:
            raise ValueError("retries, backoff and max_retry_wait must be >= 0")
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
        self.retries = retries
        self.backoff = backoff
        self.max_retry_wait = max_retry_wait
        self.strict = strict
        self.bfloat16: BF16Mode = bfloat16
        self._conn: Optional[http.client.HTTPConnection] = None
        # The waits between tries (replaceable, e.g. by a test's recorder).
        self._sleep: Callable[[float], None] = time.sleep
        #: headers of the last answer, lower-case names (``x-attnbias-ignored``, ...).
        self.last_headers: Headers = {}

    def __repr__(self) -> str:
        if self.unix_socket is not None:
            return "Client(%r, unix_socket=%r)" % (self.url, self.unix_socket)
        return "Client(%r)" % self.url

    @property
    def last_config(self) -> Optional[ConfigUsed]:
        """What the server made of the last request's model config
        (``model=``, ``config=``, ``layer=``): the keys it used, the
        upstream steps it did not apply and the layer it computed, as a
        :class:`ConfigUsed`; None when the last answer carried no config
        headers.  Example::

            ab.rope(model="gemma-3-1b", layer=5, positions=8)
            ab.last_config.layer_type      # "full_attention"
            ab.last_config.upstream        # ("q_norm", "k_norm")
        """
        return ConfigUsed.from_headers(self.last_headers)

    @property
    def last_timing(self) -> Dict[str, Any]:
        """Where the last request's time went on the server, in ms, from its
        ``Server-Timing`` header: ``{"read": 21.3, "prepare": 0.1,
        "queue": 0.05, "compute": 176.2, "encode": 0.02}`` (the phases it
        went through).  An answer streamed while it was computed has
        ``"stream": True`` and no compute time; a large binary attention
        request that began computing while its body arrived has
        ``"early": (done, pieces)``, the pieces of its job done when the
        body ended.  Empty before any request."""
        out: Dict[str, Any] = {}
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

    def close(self) -> None:
        """Close the kept-alive connection (a later call reopens one)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None and self.unix_socket is not None:
            self._conn = _UnixHTTPConnection(self._netloc, self.unix_socket, self.timeout)
        elif self._conn is None and self._scheme == "https":
            if self._ssl_context is None:
                # TLS 1.2 or later, the certificate and the host name checked.
                self._ssl_context = ssl.create_default_context(cafile=self.ca_file)
            self._conn = http.client.HTTPSConnection(
                self._netloc, timeout=self.timeout, context=self._ssl_context)
        elif self._conn is None:
            self._conn = http.client.HTTPConnection(self._netloc, timeout=self.timeout)
        return self._conn

    def _send(self, method: str, path: str, body: Optional[bytes] = None,
              headers: Optional[Mapping[str, str]] = None) -> Tuple[int, Headers, bytes]:
        """One HTTP exchange; returns (status, headers, body bytes).

        A kept-alive connection the server closed meanwhile (idle timeout)
        is reopened once; every route is idempotent, so resending is safe.
        Any other failure (a timeout, a refused connection) closes the
        connection and propagates.
        """
        hdrs = {"User-Agent": "attnbias-python/" + __version__}
        if self.api_key:
            hdrs["Authorization"] = "Bearer " + self.api_key
        hdrs.update(headers or {})
        for attempt in (0, 1):
            conn = self._connection()
            try:
                try:
                    conn.request(method, self._prefix + path, body=body, headers=hdrs)
                except (BrokenPipeError, ConnectionResetError):
                    # A refused body (a 413 over the server's cap, ...) is
                    # answered with its headers; the server drains the
                    # rest within its lingering bounds and cuts a body
                    # larger or slower than those: the answer is waiting
                    # to be read.  On a connection closed while idle there
                    # is none, and getresponse raises what leads to the
                    # retry below.
                    pass
                resp = conn.getresponse()
                data = resp.read()
            except _STALE:
                self.close()
                if attempt:
                    raise
                continue
            except BaseException:
                self.close()  # half a request or answer: unusable
                raise
            headers_out = {k.lower(): v for k, v in resp.getheaders()}
            if headers_out.get("connection", "").lower() == "close":
                self.close()
            self.last_headers = headers_out
            return resp.status, headers_out, data
        raise AssertionError("unreachable")

    def _exchange(self, method: str, path: str, body: Optional[bytes] = None,
                  headers: Optional[Mapping[str, str]] = None) -> Tuple[int, Headers, bytes]:
        """_send, tried again on a 503 that carries Retry-After (a full
        queue): up to ``retries`` more times, waiting ``backoff * 2**n``
        seconds (plus up to a quarter more, so that clients refused
        together do not come back together), never less than Retry-After
        asks, each wait at most ``max_retry_wait``."""
        attempt = 0
        while True:
            status, hdrs, data = self._send(method, path, body, headers)
            after = _parse_retry_after(hdrs.get("retry-after"))
            if (status != 503 or after is None or attempt >= self.retries
                    or after > self.max_retry_wait):
                return status, hdrs, data
            wait = max(float(after), self.backoff * 2.0 ** attempt)
            self._sleep(min(wait * (1.0 + 0.25 * random.random()), self.max_retry_wait))
            attempt += 1

    @staticmethod
    def _raise_problem(status: int, headers: Mapping[str, str], data: bytes) -> None:
        try:
            prob = json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            prob = None
        retry = _parse_retry_after(headers.get("retry-after"))
        if not isinstance(prob, dict):
            raise AttnbiasError(status, detail=data.decode("utf-8", "replace")[:500],
                                retry_after=retry, body=data)
        raise AttnbiasError(status, prob.get("type"), prob.get("title"),
                            prob.get("detail") or prob.get("error"),
                            prob.get("field"), retry, prob)

    def _warn_ignored(self, path: str, headers: Mapping[str, str]) -> None:
        ignored = headers.get("x-attnbias-ignored")
        if ignored:
            fields = [urllib.parse.unquote(f) for f in ignored.split(",") if f.strip()]
            warnings.warn(IgnoredFieldsWarning(path, fields),
                          stacklevel=_caller_stacklevel())

    def _get(self, path: str, accept: str) -> bytes:
        status, headers, data = self._exchange("GET", path, headers={"Accept": accept})
        if status // 100 != 2:
            self._raise_problem(status, headers, data)
        return data

    def _get_json(self, path: str) -> Any:
        return json.loads(self._get(path, JSON).decode("utf-8"))

    def request(self, path: str, params: Mapping[str, Any], accept: Optional[str] = None
                ) -> Union[Dict[str, Any], bytes]:
        """POST ``params`` to ``path`` and return the decoded outputs.

        The general form behind every compute method: ``params`` is the
        request object of the HTTP API (numpy arrays allowed anywhere a
        tensor goes).  Returns a dict ``{output name: ndarray or float}``;
        ``accept="image/png"`` returns the PNG bytes.
        """
        fields, tensors = _split_tensors(params)
        fields = jsonable(fields)
        nbytes = sum(t.nbytes for t in tensors.values())
        binary = (self.transport == "safetensors" or
                  (self.transport == "auto" and nbytes > self.binary_threshold))
        want_json = accept is None and self.accept == "json"
        if want_json:
            fields.setdefault("encoding", "b64")
        if binary:
            body = safetensors_dumps(tensors, {"params": json.dumps(fields)})
            ctype = SAFETENSORS
        else:
            for name, t in tensors.items():
                _set_path(fields, name, b64_tensor(t))
            body = json.dumps(fields, separators=(",", ":"), allow_nan=False).encode("utf-8")
            ctype = JSON
        hdrs = {"Content-Type": ctype, "Accept": accept or (JSON if want_json else SAFETENSORS)}
        if self.strict:
            hdrs["Prefer"] = "handling=strict"
        status, headers, data = self._exchange("POST", path, body, hdrs)
        self._warn_ignored(path, headers)
        if status // 100 != 2:
            self._raise_problem(status, headers, data)
        rtype = headers.get("content-type", "").split(";")[0].strip()
        if rtype == SAFETENSORS:
            arrays, meta = safetensors_loads(data, self.bfloat16)
            out: Dict[str, Any] = dict(arrays)
            for k, v in meta.items():
                value = decode_metadata_output(v)
                if value is not None:  # else metadata that is no output
                    out[k] = value
            return out
        if rtype in (JSON, "application/problem+json"):
            obj = json.loads(data.decode("utf-8"))
            return {k: decode_json_output(v, self.bfloat16) for k, v in obj.items()}
        return data

    def _outputs(self, path: str, params: Mapping[str, Any]) -> Result:
        """POST and unwrap: one output alone, several as a dict."""
        out = cast(Dict[str, Any], self.request(path, params))
        return next(iter(out.values())) if len(out) == 1 else out

    def _png(self, path: str, params: Mapping[str, Any]) -> bytes:
        return cast(bytes, self.request(path, params, accept=PNG))

    # -- GET routes -----------------------------------------------------------

    def health(self) -> Dict[str, Any]:
        """``GET /healthz``: ``{"status": "ok"}`` while the server lives."""
        return cast(Dict[str, Any], self._get_json("/healthz"))

    def ready(self) -> bool:
        """``GET /readyz``: True when the server accepts work (False while
        draining).  Not retried: a 503 here is the answer."""
        status, _, _ = self._send("GET", "/readyz")
        return status == 200

    def metrics(self) -> str:
        """``GET /metrics``: the Prometheus text."""
        return self._get("/metrics", "text/plain").decode("utf-8")

    def openapi(self) -> str:
        """``GET /openapi.yaml``: the server's OpenAPI document (YAML text)."""
        return self._get("/openapi.yaml", "application/yaml").decode("utf-8")

    def methods(self) -> Dict[str, Any]:
        """``GET /v1/methods``: the catalog of methods, RoPE types and their
        parameters (types, defaults, ranges, descriptions), as a dict."""
        return cast(Dict[str, Any], self._get_json("/v1/methods"))

    def models(self) -> Dict[str, Any]:
        """``GET /v1/models``: the model presets the server ships (the names
        ``model=`` takes), on servers that have presets; others answer 404,
        raised as :class:`AttnbiasError`."""
        return cast(Dict[str, Any], self._get_json("/v1/models"))

    # -- compute routes -------------------------------------------------------

    def encodings(self, method: str = "sinusoidal", positions: Any = None,
                  dim: Optional[int] = None, *, x: Any = None, table: Any = None,
                  model: Optional[str] = None, config: Optional[Mapping[str, Any]] = None,
                  layer: Optional[int] = None, **params: Any) -> Result:
        """Absolute position encodings (``POST /v1/encodings``).

        Args:
            method: ``"sinusoidal"``, ``"learned"``, ``"integer"`` or ``"binary"``.
            positions: ``n`` for positions ``0..n-1``, or a list/array of
                positions.
            dim: encoding width (not needed for ``learned``).
            x: optional ``[..., n, dim]`` array; then the result is
                ``x + encoding``.
            table: ``learned``: the ``[rows, dim]`` embedding matrix.
            model, config, layer: a model preset name, a Hugging Face
                ``config.json`` dict and the layer, sent as the fields
                ``model``, ``config`` and ``layer`` (see :meth:`rope`).
            **params: ``base`` (10000), ``layout`` (``"interleaved"``,
                ``"concat"``, ``"tensor2tensor"``), ``offset`` (learned),
                ``normalize`` (integer), ``output_dtype``.

        Returns:
            ``[n, dim]`` array (or ``x + encoding``).

        Example::

            pe = ab.encodings("sinusoidal", positions=4, dim=8)
            pe[1, :2]      # sin(1), cos(1)
        """
        return self._outputs("/v1/encodings", _fields(dict(
            method=method, positions=positions, dim=dim, x=x, table=table,
            model=model, config=config, layer=layer), params))

    def rope(self, positions: Any = None, head_dim: Optional[int] = None, *,
             q: Any = None, k: Any = None, model: Optional[str] = None,
             config: Optional[Mapping[str, Any]] = None, layer: Optional[int] = None,
             **params: Any) -> Result:
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
            model: the name of a model preset of the server (``models()``
                lists them), sent as the field ``model``.
            config: a Hugging Face ``config.json`` dict, sent whole as the
                field ``config`` for the server to read.  A server that does
                not know these fields ignores them, and the client warns
                (:class:`IgnoredFieldsWarning`): nothing is derived from
                them on this side.  :attr:`last_config` then says which
                keys the answer used.
            layer: the layer to compute, for configs whose layers differ
                (sliding or global, their own bases); the server's default
                is 0, and :attr:`last_config` names the layer computed.
            **params: ``rope_theta``, ``partial_rotary_factor`` or
                ``rotary_dim``, ``interleaved`` (False: rotate-half as in HF
                Llama / GPT-NeoX; True: GPT-J pairs), ``seq_len``,
                ``max_position_embeddings``, ``rope_scaling`` (a dict with
                HF names: ``rope_type``, ``factor``, ...), ``layout``,
                ``output_dtype``.

        Example::

            t = ab.rope(positions=8192, head_dim=128, rope_theta=500000.0)
            q_rot = ab.rope(positions=16, head_dim=128, q=q)
        """
        return self._outputs("/v1/rope", _fields(dict(
            positions=positions, head_dim=head_dim, q=q, k=k, model=model,
            config=config, layer=layer), params))

    def bias(self, method: Optional[str] = None, num_heads: Optional[int] = None,
             q_len: Optional[int] = None, k_len: Optional[int] = None, *,
             returns: Optional[Sequence[str]] = None, model: Optional[str] = None,
             config: Optional[Mapping[str, Any]] = None, layer: Optional[int] = None,
             **params: Any) -> Result:
        """Attention-bias table (``POST /v1/bias``): ``[num_heads, q_len, k_len]``.

        Query row ``r`` sits at position ``q_offset + r`` (default
        ``k_len - q_len``), key ``j`` at ``j``.

        Args:
            method: ``"alibi"``, ``"t5"``, ``"fire"``, ``"kerple"`` or ``"none"``;
                with ``model=`` or ``config=`` the model's (may be left out).
            num_heads, q_len, k_len: table size (``k_len`` defaults to
                ``q_len``; ``num_heads`` may come from the model's config).
            returns: ``["bias"]`` (default), ``["buckets"]`` or both
                (T5 buckets are int32 ``[q_len, k_len]``); with both, a dict.
            model, config, layer: as for :meth:`rope`.
            **params: ``causal``, ``q_offset``, ``window``,
                ``sliding_window``, and the method's parameters: alibi
                ``max_bias`` / ``slopes``; t5 ``table``
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
        return self._outputs("/v1/bias", _fields(dict(
            method=method, num_heads=num_heads, q_len=q_len,
            k_len=q_len if k_len is None else k_len,
            **({"return": list(returns)} if returns else {}),
            model=model, config=config, layer=layer), params))

    def bias_heatmap(self, method: str, num_heads: int, q_len: int,
                     k_len: Optional[int] = None, head: int = 0, *,
                     heads: Optional[Iterable[int]] = None, **params: Any) -> bytes:
        """The server's PNG picture of a bias table (``Accept: image/png``):
        head ``head``, or the heads ``heads`` as a grid, with query and key
        positions on the axes.  Returns the PNG bytes; in a notebook::

            from IPython.display import Image
            Image(ab.bias_heatmap("alibi", 8, 64, heads=[0, 3, 7], causal=True))
        """
        sel: Dict[str, Any] = {"heads": list(heads)} if heads is not None else {"head": head}
        return self._png("/v1/bias", _fields(dict(
            method=method, num_heads=num_heads, q_len=q_len,
            k_len=q_len if k_len is None else k_len, **sel), params))

    def attention(self, q: Any, k: Any, v: Any, *, returns: Optional[Sequence[str]] = None,
                  model: Optional[str] = None, config: Optional[Mapping[str, Any]] = None,
                  layer: Optional[int] = None, **params: Any) -> Result:
        """Full attention (``POST /v1/attention``).

        Args:
            q: ``[B, Hq, Nq, D]`` (or ``[Hq, Nq, D]``, ``[Nq, D]``); with
                ``layout="bshd"``, ``[B, Nq, Hq, D]``.
            k, v: ``[B, Hkv, Nk, D]`` and ``[B, Hkv, Nk, Dv]``; ``Hq`` must
                be a multiple of ``Hkv`` (GQA / MQA).
            returns: the outputs to get, exactly: ``["output"]``
                (default), ``["lse"]`` (then the lse array alone), or
                several, e.g. ``["output", "lse", "weights"]`` (then a dict).
            model, config, layer: as for :meth:`rope`.
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
        return self._outputs("/v1/attention", _fields(dict(
            q=q, k=k, v=v, **({"return": list(returns)} if returns else {}),
            model=model, config=config, layer=layer), params))

    def attention_heatmap(self, q: Any, k: Any, v: Any, head: int = 0, *,
                          heads: Optional[Iterable[int]] = None, batch: int = 0,
                          **params: Any) -> bytes:
        """The server's PNG picture of the attention weights
        (``Accept: image/png``) of batch entry ``batch``: head ``head``, or
        the heads ``heads`` as a grid.  ``params`` are those of
        :meth:`attention`.  Returns the PNG bytes."""
        sel: Dict[str, Any] = {"heads": list(heads)} if heads is not None else {"head": head}
        return self._png("/v1/attention", _fields(dict(q=q, k=k, v=v, batch=batch, **sel),
                                                  params))

    def analysis(self, kind: str, seq_len: int, *, model: Optional[str] = None,
                 config: Optional[Mapping[str, Any]] = None,
                 **params: Any) -> Dict[str, Any]:
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
            model, config: as for :meth:`rope`.
            **params: the RoPE fields of :meth:`rope` (``head_dim``,
                ``rope_theta``, ``max_position_embeddings`` -- the trained
                length --, ``rope_scaling``, ...) or the bias fields of
                :meth:`bias` (``method``, ``num_heads`` and the method's
                parameters); ``points`` (decay samples).

        Returns:
            a dict of arrays and numbers (``"methods"`` and ``"configs"`` of
            ``"extend"`` are a list and a dict);
            :func:`attnbias.plot_analysis` draws it.

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
        return cast(Dict[str, Any], self.request("/v1/analysis", _fields(dict(
            kind=kind, seq_len=seq_len, model=model, config=config), params)))

    def analysis_png(self, kind: str, seq_len: int, plot: Optional[str] = None,
                     **params: Any) -> bytes:
        """The server's own plot of :meth:`analysis` (``Accept: image/png``):
        ``plot`` is ``"wavelength"``, ``"decay"``, ``"scale"`` (rope,
        extend), ``"bias"``, ``"reach"`` or ``"buckets"`` (bias).  Returns
        the PNG bytes."""
        return self._png("/v1/analysis", dict(kind=kind, seq_len=seq_len, plot=plot,
                                              **params))
