"""test_families.py: every attention-bias family the library has is served
and documented wherever families are listed.

The library's list is lib/src/bias/families.def (one line per family, its
size checked against enum ab_bias_method by the compiler).  From it:
GET /v1/methods serves each family with its parameter table, the OpenAPI
document's BiasMethod enum names it (test_openapi.py then checks its
parameters against the catalog) and shows a /v1/bias request example of
each family with parameters, and the prose lists -- README.md, docs/http.md,
docs/methods.md and the Python client's docstring -- name it.  The steps
of adding a family are docs/internals/bias-families.md.

Tests follow tests/http/run.py's convention; run alone with
    /usr/bin/python3 tests/http/run.py tests/http/test_families.py
"""

import os
import re

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def read(*path):
    with open(os.path.join(ROOT, *path), encoding="utf-8") as f:
        return f.read()


def library_families():
    """The families of lib/src/bias/families.def, in enum order."""
    names = re.findall(r"^AB_BIAS_FAMILY\(\s*AB_BIAS_\w+\s*,\s*(\w+)\s*\)",
                       read("lib", "src", "bias", "families.def"), re.M)
    assert names, "families.def lists no family"
    return names


def section(text, heading, where):
    """The text of a Markdown section from `heading` to the next heading of
    the same or a higher level."""
    m = re.search(r"^(#+) " + re.escape(heading) + r"\s*$", text, re.M)
    assert m, "%s: no section %r" % (where, heading)
    level = len(m.group(1))
    end = re.search(r"^#{1,%d} " % level, text[m.end():], re.M)
    return text[m.end():m.end() + end.start() if end else len(text)]


def paragraph(text, start, where):
    """The paragraph of `text` that begins with `start`."""
    i = text.find(start)
    assert i >= 0, "%s: no paragraph starting %r" % (where, start)
    j = text.find("\n\n", i)
    return text[i:j if j >= 0 else len(text)]


def test_every_family_is_served(server):
    cat = server.get("/v1/methods").json()
    served = [m["name"] for m in cat["bias"]["methods"]]
    assert served == library_families(), (served, library_families())
    choices = {p["name"]: p for p in cat["attention"]["bias"]["parameters"]}
    assert choices["method"]["enum"] == library_families()


def test_every_family_is_in_the_openapi_document(server):
    doc = yaml.safe_load(read("api", "openapi.yaml"))
    enum = doc["components"]["schemas"]["BiasMethod"]["properties"]["method"]["enum"]
    assert sorted(enum) == sorted(library_families()), enum
    examples = doc["paths"]["/v1/bias"]["post"]["requestBody"]["content"][
        "application/json"]["examples"]
    shown = {e["value"]["method"] for e in examples.values()}
    cat = server.get("/v1/methods").json()
    for m in cat["bias"]["methods"]:
        if m["parameters"]:
            assert m["name"] in shown, (
                "openapi.yaml: /v1/bias has no request example of %s" % m["name"])


def test_every_family_is_named_in_the_docs():
    readme = paragraph(read("README.md"), "**Bias tables**", "README.md")
    http = paragraph(section(read("docs", "http.md"), "Bias tables", "docs/http.md"),
                     "`method` (", "docs/http.md")
    methods = section(read("docs", "methods.md"), "Attention biases", "docs/methods.md")
    headings = [h.lower() for h in re.findall(r"^### (.+)$", methods, re.M)]
    client = read("api", "python", "attnbias", "_client.py")
    doc = re.search(r"def bias\(.*?\"\"\"(.*?)\"\"\"", client, re.S)
    assert doc, "_client.py: no docstring of bias()"
    method_arg = re.search(r"method: (.*?)\n", doc.group(1)).group(1)
    for name in library_families():
        quoted = "`%s`" % name
        assert quoted in readme, "README.md's bias tables paragraph lacks %s" % quoted
        assert quoted in http, "docs/http.md's bias method list lacks %s" % quoted
        assert any(h.startswith(name) or h.split()[0] == name for h in headings), (
            "docs/methods.md#attention-biases has no section on %s (%s)" % (name, headings))
        assert '``"%s"``' % name in method_arg, (
            "the Python client's bias() docstring does not name %s" % name)
