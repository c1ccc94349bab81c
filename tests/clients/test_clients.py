"""test_clients.py: api/openapi.yaml as linters and code generators see it.

- Redocly CLI and Spectral lint the document with the rulesets of this
  directory (redocly.yaml, .spectral.yaml: each linter's recommended rules
  plus others, none turned off): 0 errors, 0 warnings.  Both validate every
  example against its schema, which a document with a wrong example shows.
- openapi-typescript (types for openapi-fetch) and @hey-api/openapi-ts (an
  SDK) generate TypeScript from the document into generated/; no schema
  comes out as `unknown`, no type name clashes.
- `tsc --noEmit` type-checks both clients, the README's example and the
  programs of src/ under `strict` (tsconfig.json; the libraries' own .d.ts
  files are not checked again, skipLibCheck, as usual).
- src/openapi-fetch.ts and src/hey-api.ts, compiled, call every route of a
  server started here (and of a second one with an API key), JSON and
  binary answers alike, and check the numbers against float64 references
  and against what fetch itself gets (lib.ts).
- The README's TypeScript example, compiled, prints what its comments say;
  the versions it installs are the ones pinned here.

The npm packages are pinned in package.json and package-lock.json; `make
test` installs them with `npm ci` (once, and again when the lockfile
changes), after which nothing here uses the network.  Generated and
compiled files (generated/, dist/) are not committed: they are made again
from api/openapi.yaml on every run, so they cannot go stale.

Run by tests/run-all.sh as the suite "clients", or alone:
    /usr/bin/python3 tests/http/run.py --server build/attnbiasd tests/clients/test_clients.py
Skipped (as something outside the project) when Node.js 20.19+ is missing.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile

import run
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SPEC = os.path.join(ROOT, "api", "openapi.yaml")
BIN = os.path.join(HERE, "node_modules", ".bin")
# The lockfile as `make test` last installed it (Makefile: NPM_STAMP).
STAMP = os.path.join(HERE, "node_modules", ".package-lock.attnbias")
NODE_MIN = (20, 19)
# No telemetry, no update checks, no colours: the tools run offline.
ENV = dict(os.environ, REDOCLY_TELEMETRY="off", REDOCLY_SUPPRESS_UPDATE_NOTICE="true",
           SCARF_ANALYTICS="false", NO_UPDATE_NOTIFIER="1", NO_COLOR="1", FORCE_COLOR="0")

_state = {}


def ready():
    """Skip without Node.js; fail when `make test` did not install the
    packages of the current lockfile."""
    if "ready" not in _state:
        node = shutil.which("node")
        if not node:
            _state["ready"] = "no node on PATH"
        else:
            out = subprocess.run([node, "--version"], capture_output=True, text=True).stdout
            version = tuple(int(x) for x in re.findall(r"\d+", out)[:2])
            _state["ready"] = None if version >= NODE_MIN else "node %s, need %d.%d+" % (
                out.strip(), *NODE_MIN)
    if _state["ready"]:
        raise run.Skip(_state["ready"])
    with open(os.path.join(HERE, "package-lock.json"), "rb") as f:
        lock = f.read()
    try:
        with open(STAMP, "rb") as f:
            installed = f.read()
    except FileNotFoundError:
        installed = None
    assert installed == lock, (
        "tests/clients/node_modules is missing or older than package-lock.json: "
        "`make test` installs it (or: cd tests/clients && npm ci)")


def tools(*commands, timeout=300):
    """Run node_modules/.bin commands, [name, args...] each, side by side in
    this directory -> [(status, stdout, stderr)] in their order."""
    ready()
    procs = [subprocess.Popen([os.path.join(BIN, c[0])] + list(c[1:]), cwd=HERE, env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c in commands]
    try:
        outs = [p.communicate(timeout=timeout * run.SLOW) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [(p.returncode, o, e) for p, (o, e) in zip(procs, outs)]


def tool(name, *args):
    return tools([name] + list(args))[0]


def broken_copy(directory):
    """api/openapi.yaml with one request example and one response example
    that break their schemas, written into directory -> its path."""
    with open(SPEC, encoding="utf-8") as f:
        text = f.read()
    bad = text.replace("value: {method: sinusoidal, positions: 4, dim: 8}",
                       "value: {method: sinusoidal, positions: 0, dim: 8}", 1)
    bad = bad.replace("data: [-3.6670523,", 'data: ["one",', 1)
    assert bad.count("positions: 0, dim: 8") == 1 and '["one",' in bad, "examples moved"
    path = os.path.join(directory, "broken.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(bad)
    return path


# Where broken_copy broke the document, as JSON Pointers.
BROKEN = ("#/paths/~1v1~1encodings/post/requestBody/content/application~1json/"
          "examples/sinusoidal/value/positions",
          "#/paths/~1v1~1rope/post/responses/200/content/application~1json/"
          "examples/apply/value/q/data/0")


def json_stream(text):
    """The JSON values written one after the other in text."""
    dec, out, i = json.JSONDecoder(), [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return out
        value, i = dec.raw_decode(text, i)
        out.append(value)


def lint():
    """Each linter run once over the document and its broken copy ->
    {linter: {"spec" | "broken": ["pointer rule: message" of each finding]},
    "redocly-version": ...}."""
    if "lint" in _state:
        return _state["lint"]
    with tempfile.TemporaryDirectory(prefix="attnbias-lint-") as tmp:
        broken = broken_copy(tmp)
        (rs, ro, re_), (ss, so, se) = tools(
            ["redocly", "lint", "--config", "redocly.yaml", "--format", "json", SPEC, broken],
            ["spectral", "lint", "-r", ".spectral.yaml", "-f", "json", "-q", SPEC, broken])
    redocly = json_stream(ro)   # one report per file
    assert len(redocly) == 2, "redocly (%d): %s%s" % (rs, ro, re_[-2000:])
    assert so.strip().startswith("["), "spectral (%d): %s%s" % (ss, so, se[-2000:])
    spectral = json.loads(so)
    res = {"redocly": {"spec": [], "broken": []}, "spectral": {"spec": [], "broken": []}}
    for which, report in zip(("spec", "broken"), redocly):
        for p in report["problems"]:
            res["redocly"][which].append("%s %s: %s" % (
                p["location"][0]["pointer"], p["ruleId"], p["message"]))
    for r in spectral:
        which = "broken" if r["source"].endswith("broken.yaml") else "spec"
        pointer = "#/" + "/".join(str(x).replace("~", "~0").replace("/", "~1")
                                  for x in r["path"])
        res["spectral"][which].append("%s %s: %s" % (pointer, r["code"], r["message"]))
    res["redocly-version"] = redocly[0].get("version")
    _state["lint"] = res
    return res


def _no_rule_off(path):
    with open(os.path.join(HERE, path), encoding="utf-8") as f:
        rules = yaml.safe_load(f).get("rules", {})
    off = [k for k, v in rules.items() if v in ("off", False) or
           (isinstance(v, dict) and v.get("severity") == "off")]
    assert not off, "%s turns rules off: %s" % (path, off)


# ===========================================================================
# the linters
# ===========================================================================

def test_redocly_lints_clean():
    _no_rule_off("redocly.yaml")
    found = lint()["redocly"]["spec"]
    print("     redocly %s: %d problems (errors and warnings)" % (
        lint()["redocly-version"], len(found)))
    assert not found, "\n".join(found)[:4000]


def test_spectral_lints_clean():
    _no_rule_off(".spectral.yaml")
    with open(os.path.join(HERE, ".spectral.yaml"), encoding="utf-8") as f:
        assert "spectral:oas" in yaml.safe_load(f)["extends"]
    found = lint()["spectral"]["spec"]
    print("     spectral: %d results" % len(found))
    assert not found, "\n".join(found)[:4000]


def test_linters_validate_examples():
    """A request example and a response example that break their schemas
    are reported by both linters (examples are validated, not skipped)."""
    for name in ("redocly", "spectral"):
        found = lint()[name]["broken"]
        for where in BROKEN:
            assert any(f.startswith(where) for f in found), "%s missed %s: %s" % (
                name, where, found)


# ===========================================================================
# the generators and the compiler
# ===========================================================================

def _code(text):
    """TypeScript without its comments (the descriptions mention words) and
    without the index signatures of open maps: a model's config.json (and a
    family's defaults) may hold any JSON, so `[key: string]: unknown` is what
    their schema means, not a schema the generator failed to read."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"\[key: string\]: unknown;?", "", text)


def readme_typescript():
    """The README's TypeScript section: (its shell commands and prose, its example)."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("### TypeScript client"):]
    section = section[:section.index("\n## ")]
    shell = re.findall(r"^```sh\n(.*?)^```", section, re.M | re.S)
    example = re.findall(r"^```ts\n(.*?)^```", section, re.M | re.S)
    assert len(shell) == 2 and len(example) == 1, "README's TypeScript section changed shape"
    return shell[0] + shell[1] + section, example[0]


def generate():
    """generated/ made again from api/openapi.yaml, the generators side by
    side: openapi-typescript's types for openapi-fetch, hey-api's SDK, and
    the README's example with the types its own command makes ->
    {name: (status, output)}."""
    if "generated" in _state:
        return _state["generated"]
    out = os.path.join(HERE, "generated")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "readme"))
    commands, example = readme_typescript()
    with open(os.path.join(out, "readme", "example.ts"), "w", encoding="utf-8") as f:
        f.write(example)
    readme = re.search(r"^npx openapi-typescript (\S+) (.*) -o (\S+)$", commands, re.M)
    assert readme and readme.group(1) == "http://127.0.0.1:8080/openapi.yaml", "README command"
    runs = {
        # openapi-typescript makes a property with a `default` required
        # unless told otherwise: right for answers, wrong for requests,
        # whose defaults are what the server assumes when a field is absent.
        "openapi-typescript": ["openapi-typescript", SPEC, "--default-non-nullable", "false",
                               "-o", os.path.join("generated", "openapi-typescript", "schema.ts")],
        # The README's command on this document (the one the server serves).
        "readme": ["openapi-typescript", SPEC] + readme.group(2).split() + [
            "-o", os.path.join("generated", "readme", readme.group(3))],
        "hey-api": ["openapi-ts", "-i", SPEC, "-o", os.path.join("generated", "hey-api"),
                    "-c", "@hey-api/client-fetch", "--no-log-file"],
    }
    results = tools(*runs.values())
    _state["generated"] = {name: (st, so + se) for name, (st, so, se) in zip(runs, results)}
    return _state["generated"]


def test_openapi_typescript_generates():
    status, output = generate()["openapi-typescript"]
    assert status == 0, output
    with open(os.path.join(HERE, "generated", "openapi-typescript", "schema.ts"),
              encoding="utf-8") as f:
        code = _code(f.read())
    schemas = code[code.index("schemas: {"):code.index("responses: {")]
    assert "unknown" not in schemas, "a schema became `unknown`"
    for name in ("RopeResult", "BiasResult", "AttentionResult", "EncodingsResult"):
        assert re.search(r"\b%s: \{\n\s+\w+\?: components" % name, schemas), name


def test_hey_api_generates():
    status, output = generate()["hey-api"]
    assert status == 0, output
    with open(os.path.join(HERE, "generated", "hey-api", "types.gen.ts"), encoding="utf-8") as f:
        code = _code(f.read())
    assert "unknown" not in code, "a schema became `unknown`"
    # One type per schema, and per operation its Data, Errors, Error,
    # Responses and Response: a schema named like an operation's type
    # (RopeResponse) would have come out renamed (RopeResponse2).
    with open(SPEC, encoding="utf-8") as f:
        components = yaml.safe_load(f)["components"]
    # Schemas and shared parameters (Prefer) each become a type.
    names = set(components["schemas"]) | set(components.get("parameters", {})) | {"ClientOptions"}
    for _, _, op in _operations():
        names |= {op[0].upper() + op[1:] + s for s in
                  ("Data", "Errors", "Error", "Responses", "Response")}
    made = set(re.findall(r"^export type (\w+) ", code, re.M))
    assert made == names, "unexpected types %s, missing %s" % (
        sorted(made - names), sorted(names - made))


def test_readme_example_generates():
    """The README's example is in generated/readme/ as written, beside the
    types of its own command, so that tsc checks it with the clients; the
    versions it installs are the ones pinned here, its tsc flags those of
    tsconfig.json."""
    status, output = generate()["readme"]
    assert status == 0, output
    commands, _ = readme_typescript()
    with open(os.path.join(HERE, "package.json"), encoding="utf-8") as f:
        pins = json.load(f)["devDependencies"]
    named = re.findall(r"((?:@[\w.-]+/)?[\w.-]+)@(\d+\.\d+\.\d+)", commands)
    assert len(named) >= 4, named
    for pkg, version in named:
        assert pins.get(pkg) == version, "README installs %s@%s, package.json pins %s" % (
            pkg, version, pins.get(pkg))
    tsc = re.search(r"^npx tsc (.*) example\.ts && node example\.js$", commands, re.M)
    assert tsc, "README's tsc command"
    with open(os.path.join(HERE, "tsconfig.json"), encoding="utf-8") as f:
        options = {k: str(v).lower() for k, v in json.load(f)["compilerOptions"].items()}
    for flag, value in re.findall(r"--(\w+)(?: (\w+))?", tsc.group(1)):
        assert options.get(flag) == (value.lower() or "true"), (flag, value)


def test_tsc_strict_typechecks():
    with open(os.path.join(HERE, "tsconfig.json"), encoding="utf-8") as f:
        assert json.load(f)["compilerOptions"]["strict"] is True
    status, out, err = tool("tsc", "--noEmit", "-p", ".")
    print("     tsc --noEmit -p tests/clients: exit %d, %d lines of output" % (
        status, len((out + err).splitlines())))
    assert status == 0 and not (out + err).strip(), out + err


# ===========================================================================
# the clients, called
# ===========================================================================

def compiled():
    """dist/: the programs, the generated clients and the README's example as
    JavaScript (type-checked by test_tsc_strict_typechecks; transpile.mjs
    only strips the types)."""
    if "dist" not in _state:
        ready()
        shutil.rmtree(os.path.join(HERE, "dist"), ignore_errors=True)
        p = subprocess.run(["node", "transpile.mjs"], cwd=HERE, env=ENV, capture_output=True,
                           text=True, timeout=300 * run.SLOW)
        _state["dist"] = (p.returncode, p.stdout + p.stderr)
    assert _state["dist"][0] == 0, _state["dist"][1]


def run_program(name, server, start):
    compiled()
    key = "clients-test-key"
    keyed = start(api_key=key)
    p = subprocess.run(["node", os.path.join("dist", "src", name + ".js"), server.url,
                        keyed.url, key], cwd=HERE, env=ENV, capture_output=True, text=True,
                       timeout=120 * run.SLOW)
    lines = p.stdout.splitlines()
    summary = lines[-1] if lines else ""
    m = re.fullmatch(r"(\d+) passed, (\d+) failed", summary)
    failures = [ln for ln in lines if not ln.startswith("ok   ")]
    assert p.returncode == 0 and m and m.group(2) == "0", "\n".join(failures) + p.stderr
    print("     %s: %s" % (name, summary))
    return {ln[5:] for ln in lines if ln.startswith("ok   ")}


def test_readme_example_runs(server):
    """The README's example, compiled, prints what its comments say."""
    compiled()
    _, example = readme_typescript()
    want = [m.strip() for m in re.findall(r"console\.log\(.*?\);\s*//([^\n]*)", example)]
    assert len(want) >= 3, want
    path = os.path.join(HERE, "dist", "generated", "readme", "example.js")
    with open(path, encoding="utf-8") as f:
        js = f.read()
    assert js.count("http://127.0.0.1:8080") == 1, "the example's base URL"
    with open(path, "w", encoding="utf-8") as f:    # aimed at the test server
        f.write(js.replace("http://127.0.0.1:8080", server.url))
    p = subprocess.run(["node", path], cwd=HERE, env=ENV, capture_output=True, text=True,
                       timeout=60 * run.SLOW)
    assert p.returncode == 0 and p.stdout.splitlines() == want, (p.stdout, p.stderr, want)


def _operations():
    with open(SPEC, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    return [(m.upper(), path, op["operationId"]) for path, item in doc["paths"].items()
            for m, op in item.items()]


def test_openapi_fetch_calls_every_route(server, start):
    passed = run_program("openapi-fetch", server, start)
    for method, path, _ in _operations():
        assert any(c.startswith("%s %s" % (method, path)) for c in passed), path


def test_hey_api_sdk_calls_every_route(server, start):
    passed = run_program("hey-api", server, start)
    for _, _, op in _operations():
        assert any(c.split(" ")[0] == op for c in passed), op
