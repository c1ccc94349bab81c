#!/usr/bin/python3
"""seed.py: seeds for the fuzz corpora from requests the project already
makes -- the README's curl examples and every request the HTTP tests send
through their harness (tests/http/run.py, Server.request) -- so that the
fuzzers start from valid requests of every route and reach deep fields.

    /usr/bin/python3 tests/fuzz/seed.py --server build/attnbiasd \\
        --out build-fuzz/corpus [run.py options, e.g. -k test_routes]

Writes, per target, into OUT/<target>/ (the scratch corpora of `make fuzz`):
  params-<route>   JSON bodies POSTed to /v1/<route>, after an
                   "Accept: <value>" line when the request had one;
  safetensors      safetensors bodies, after fuzz-safetensors.c's mode
                   byte (the route; for /v1/attention also a copy that
                   starts early with half the data section in);
  codec            both kinds, after fuzz-codec.c's mode byte;
  model            the presets' configs (models/*.json) for a few layers,
                   and every "config" object a JSON request sent, after
                   fuzz-model.c's layer byte.
Bodies over 64 KiB are left out.  `make fuzz-merge` then folds the scratch
corpora into tests/fuzz/corpus/, keeping only inputs that add coverage.
"""

import hashlib
import importlib.util
import json
import os
import re
import shlex
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MAX_BODY = 64 << 10
# The body routes in routes.def order (fuzz_route_at's index: the
# safetensors target's route byte picks one of these).
ROUTES = ["encodings", "rope", "bias", "attention"]
# The routes with a params-<route> target (FUZZ_ROUTES of the Makefile).
PARAM_ROUTES = ROUTES + ["analysis"]


class Seeds:
    def __init__(self, out):
        self.out = out
        self.count = {}

    def add(self, target, data):
        d = os.path.join(self.out, target)
        os.makedirs(d, exist_ok=True)
        name = "seed-" + hashlib.sha1(data).hexdigest()[:16]
        path = os.path.join(d, name)
        if not os.path.exists(path):
            with open(path, "wb") as f:
                f.write(data)
            self.count[target] = self.count.get(target, 0) + 1

    def request(self, path, headers, body):
        m = re.fullmatch(r"/v1/(\w+)", path or "")
        if (not m or m.group(1) not in PARAM_ROUTES or not body or
                len(body) > MAX_BODY):
            return
        h = {k.lower(): v for k, v in (headers or {}).items() if v is not None}
        ctype = h.get("content-type", "application/json")
        accept = h.get("accept")
        if "safetensors" in ctype and m.group(1) in ROUTES:
            route = ROUTES.index(m.group(1))
            self.add("safetensors", bytes([route]) + body)
            if m.group(1) == "attention":
                self.add("safetensors", bytes([route | 16 << 2]) + body)
            # fuzz-codec.c: bits 0-1 Content-Type (1: safetensors).
            self.add("codec", bytes([1]) + body)
        elif "json" in ctype:
            head = ("Accept: %s\n" % accept).encode() if accept else b""
            self.add("params-" + m.group(1), head + body)
            self.add("codec", bytes([0]) + body)
            try:
                req = json.loads(body)
            except ValueError:
                return
            if isinstance(req, dict) and isinstance(req.get("config"), dict):
                layer = req.get("layer", 0)
                if isinstance(layer, int) and 0 <= layer < 0xf0:
                    self.model(req["config"], layer)

    def model(self, config, layer):
        """fuzz-model.c: the layer byte, then the config's JSON text."""
        self.add("model", bytes([layer]) + json.dumps(config).encode())


def preset_configs(seeds):
    """The presets' configs, for layers 0, 1 and 5 (families whose layers
    alternate differ there)."""
    d = os.path.join(ROOT, "models")
    for name in sorted(os.listdir(d)):
        if name.endswith(".json"):
            with open(os.path.join(d, name)) as f:
                config = json.load(f)["config"]
            for layer in (0, 1, 5):
                seeds.model(config, layer)


def readme_requests(seeds):
    """The curl commands of README.md that POST to a /v1 route."""
    text = open(os.path.join(ROOT, "README.md")).read()
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        # One word list per block (a quoted body may span lines), cut at
        # each "curl".
        words = shlex.split(block, comments=True)
        starts = [i for i, w in enumerate(words) if w == "curl"]
        for a, b in zip(starts, starts[1:] + [len(words)]):
            argv = words[a:b]
            urls = [w for w in argv if w.startswith("http")]
            headers, body = {}, None
            for i, w in enumerate(argv[:-1]):
                if w == "-H" and ":" in argv[i + 1]:
                    k, v = argv[i + 1].split(":", 1)
                    headers[k.strip()] = v.strip()
                elif w == "-d":
                    body = argv[i + 1].encode()
            if urls and body:
                seeds.request(re.sub(r"^https?://[^/]+", "", urls[0]),
                              headers, body)


def main(argv):
    out = os.path.join(ROOT, "build-fuzz", "corpus")
    if "--out" in argv:
        i = argv.index("--out")
        out = argv[i + 1]
        del argv[i:i + 2]
    seeds = Seeds(out)
    readme_requests(seeds)
    preset_configs(seeds)

    spec = importlib.util.spec_from_file_location(
        "run", os.path.join(ROOT, "tests", "http", "run.py"))
    run = importlib.util.module_from_spec(spec)
    sys.modules["run"] = run
    spec.loader.exec_module(run)
    plain = run.Server.request

    def recording(self, method, path, body=None, json=None, headers=None,
                  **kw):
        if method == "POST":
            data = body.encode() if isinstance(body, str) else body
            hdrs = dict(headers or {})
            if json is not None:
                data = run.jsonlib.dumps(json).encode()
                hdrs.setdefault("Content-Type", "application/json")
            seeds.request(path, hdrs, data)
        return plain(self, method, path, body=body, json=json,
                     headers=headers, **kw)

    run.Server.request = recording
    status = run.main(argv)
    for t in sorted(seeds.count):
        print("seed.py: %d new inputs in %s" % (seeds.count[t],
                                               os.path.join(out, t)))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
