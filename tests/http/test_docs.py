"""test_docs.py: the project documents itself.

- Every document the repository cites is one of its own files: relative
  links of the Markdown files, and every mention of a `.md` file or of a
  `docs/...` path in code, comments, tests and docs, must name a file that
  exists (with its `#anchor` a heading of that file); the reference
  documents the project was first written from are not in the repository,
  and naming them is an error wherever it happens.
- The worked examples of docs/methods.md are what docs/worked_examples.py
  computes in float64, block by block, and the identities the page states
  hold.
- The examples of docs/http.md run against the server as printed: the
  2xx ones as the README's do (test_readme.run_curl), an error example
  answers the problem shown after it.

Tests follow tests/http/run.py's convention; run alone with
    /usr/bin/python3 tests/http/run.py tests/http/test_docs.py
"""

import importlib.util
import json
import math
import os
import re
import subprocess

import numpy as np

import test_readme

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DOCS = os.path.join(ROOT, "docs")

# The documents attnbias was first specified in, which live outside the
# repository.  Spelt in pieces so that this file does not cite them itself.
OUTSIDE = ["API" + ".md", "worked-" + "examples.md", "spec" + "/methods.md",
           "spec" + "/README.md", "BENCH" + ".md", "/work" + "/shared"]

SKIP_DIRS = {".git", "build", "node_modules", "__pycache__"}
SKIP_PREFIXES = ("tests/fuzz/corpus/",)


def repo_files():
    """Paths (relative to ROOT) of the repository's text files: git's
    tracked and not-ignored files when git is there, else a walk."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--cached",
                              "--others", "--exclude-standard"],
                             capture_output=True, check=True, timeout=60).stdout
        paths = sorted({p for p in out.decode().split("\0") if p})
    except (OSError, subprocess.SubprocessError):
        paths = []
        for d, dirs, files in os.walk(ROOT):
            dirs[:] = [x for x in dirs if x not in SKIP_DIRS]
            paths += [os.path.relpath(os.path.join(d, f), ROOT) for f in files]
    for p in paths:
        if p.startswith(SKIP_PREFIXES) or not os.path.isfile(os.path.join(ROOT, p)):
            continue
        try:
            with open(os.path.join(ROOT, p), encoding="utf-8") as f:
                yield p, f.read()
        except UnicodeDecodeError:
            continue                     # binary


def slug(heading):
    """The anchor GitHub gives a Markdown heading."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


_anchors = {}


def anchors(path):
    """The anchors of the headings of the Markdown file `path` (absolute)."""
    if path not in _anchors:
        with open(path, encoding="utf-8") as f:
            text = re.sub(r"^```.*?^```", "", f.read(), flags=re.M | re.S)
        seen, out = {}, set()
        for h in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M):
            base = slug(h)
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else "%s-%d" % (base, n))
        _anchors[path] = out
    return _anchors[path]


def check_target(src, target, base_dirs):
    """An error sentence when `target` (a path, maybe with #anchor) cited in
    src names no file under one of base_dirs, or no heading; else None."""
    path, _, frag = target.partition("#")
    if not path:
        full = os.path.join(ROOT, src)
    else:
        cands = [os.path.normpath(os.path.join(b, path)) for b in base_dirs]
        found = [c for c in cands if os.path.exists(c)]
        if not found:
            return "%s cites %s, which is not a file of the repository" % (src, target)
        full = found[0]
        if not full.startswith(ROOT + os.sep):
            return "%s cites %s, outside the repository" % (src, target)
    if frag and full.endswith(".md") and frag not in anchors(full):
        return "%s cites %s: %s has no heading #%s" % (
            src, target, os.path.relpath(full, ROOT), frag)
    return None


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A path-like mention of a Markdown file, or of anything under docs/.
MENTION = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w.-]+\.md(?:#[\w-]+)?"
                     r"|docs/[\w./-]*[\w](?:#[\w-]+)?)")


def test_no_document_outside_the_repository():
    errors = []
    for path, text in repo_files():
        for name in OUTSIDE:
            for m in re.finditer(re.escape(name), text):
                line = text.count("\n", 0, m.start()) + 1
                errors.append("%s:%d names %s, which is not in the repository"
                              % (path, line, name))
    assert not errors, "\n".join(errors)


def test_cited_documents_exist():
    errors = []
    for path, text in repo_files():
        here = os.path.dirname(os.path.join(ROOT, path))
        if path.endswith(".md"):
            body = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
            for m in LINK.finditer(body):
                t = m.group(1)
                if re.match(r"[a-z]+:", t):
                    continue             # http:, https:, mailto:
                e = check_target(path, t, [here])
                if e:
                    errors.append(e)
        for m in MENTION.finditer(text):
            t = m.group(1)
            # A quoted bare name is a path being built in code
            # (os.path.join(ROOT, "docs", "models.md")), not a citation.
            before = text[m.start() - 1] if m.start() else ""
            after = text[m.end()] if m.end() < len(text) else ""
            quoted = before and before in "\"'" and before == after and "/" not in t
            # ref.md = 100: a C or Python member named md, not a file.
            member = not path.endswith(".md") and t.endswith(".md") and \
                re.match(r"\s*(=[^=]|\[|;|->)", text[m.end():m.end() + 8])
            if quoted or member:
                continue
            # Paths are relative to the repository's root or to the citing
            # file's directory (a Markdown sibling).
            e = check_target(path, t, [ROOT, here])
            if e:
                errors.append(e)
    assert not errors, "\n".join(sorted(set(errors)))


def test_checker_catches_bad_citations():
    """The checks above fail on what they exist to catch."""
    # Names put together here, so that this file cites none of them.
    d, md = "docs", ".md"
    assert check_target("x.c", d + "/nothing" + md, [ROOT])
    assert check_target("x.c", d + "/methods" + md + "#no-such-heading", [ROOT])
    assert check_target("x.c", d + "/methods" + md + "#t5-buckets", [ROOT]) is None
    assert check_target("x.c", "../outside" + md, [ROOT])
    text = "see spec/methods%s 4.1, %s/http%s#errors (methods%s) and %s/x.py" % (
        md, d, md, md, d)
    cites = [m.group(1) for m in MENTION.finditer(text)]
    assert cites == ["spec/methods" + md, d + "/http" + md + "#errors",
                     "methods" + md, d + "/x.py"], cites
    assert slug("Example 12: attention") == "example-12-attention"
    assert slug("none (NoPE)") == "none-nope"


# ===========================================================================
# worked examples
# ===========================================================================

def worked_examples():
    spec = importlib.util.spec_from_file_location(
        "worked_examples", os.path.join(DOCS, "worked_examples.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


NUMBER = re.compile(r"-?inf|nan|-?\d+(?:\.\d*)?(?:e[-+]?\d+)?")


def page_blocks():
    """{id: [numbers]} of docs/methods.md's marked blocks, in order."""
    with open(os.path.join(DOCS, "methods.md"), encoding="utf-8") as f:
        text = f.read()
    found = re.findall(r"<!-- example (\S+) -->\n```text\n(.*?)^```", text,
                       re.M | re.S)
    blocks = {}
    for eid, body in found:
        assert eid not in blocks, "example %s appears twice" % eid
        blocks[eid] = [float(x) for x in NUMBER.findall(body)]
    return blocks


def mismatches(blocks, examples):
    """Sentences for every example whose printed numbers (7 significant
    digits) are not the script's float64 values."""
    out = []
    if set(blocks) != set(examples):
        out.append("on the page only: %s; in the script only: %s" % (
            sorted(set(blocks) - set(examples)), sorted(set(examples) - set(blocks))))
    for eid in sorted(set(blocks) & set(examples)):
        want = np.ravel(np.asarray(examples[eid](), dtype=np.float64))
        got = np.asarray(blocks[eid])
        if got.shape != want.shape:
            out.append("example %s: %d numbers, the script %d" % (eid, got.size, want.size))
            continue
        for g, w in zip(got, want):
            if math.isnan(w) or math.isinf(w):
                ok = g == w or (math.isnan(g) and math.isnan(w))
            else:                        # within half a unit of the 7th digit
                ok = abs(g - w) <= 5.01e-7 * abs(w)
            if not ok:
                out.append("example %s: the page says %r, the script computes %r"
                           % (eid, g, w))
    return out


def test_worked_examples_match_the_script():
    we = worked_examples()
    bad = mismatches(page_blocks(), we.EXAMPLES)
    assert not bad, "\n".join(bad)
    we.self_checks()


def test_worked_example_check_catches_a_wrong_digit():
    """A number off in its 6th significant digit, a missing number or a
    missing block is reported."""
    we = worked_examples()
    blocks = page_blocks()
    wrong = dict(blocks, **{"6-half-1": [blocks["6-half-1"][0] * (1 + 2e-6)]
                            + blocks["6-half-1"][1:]})
    assert any("6-half-1" in m for m in mismatches(wrong, we.EXAMPLES))
    short = dict(blocks, **{"12c-w0": blocks["12c-w0"][:-1]})
    assert any("12c-w0" in m for m in mismatches(short, we.EXAMPLES))
    gone = {k: v for k, v in blocks.items() if k != "9"}
    assert mismatches(gone, we.EXAMPLES)


# ===========================================================================
# docs/http.md examples
# ===========================================================================

def http_examples():
    """[(curl command, expected problem or None)] of docs/http.md: a shell
    block followed by a JSON block holding a problem is an error example."""
    path = os.path.join(DOCS, "http.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    blocks = re.findall(r"^```([\w+-]*)\n(.*?)^```", text, re.M | re.S)
    out = []
    for i, (lang, body) in enumerate(blocks):
        if lang != "sh":
            continue
        want = None
        if i + 1 < len(blocks) and blocks[i + 1][0] == "json":
            want = json.loads(blocks[i + 1][1])
        for cmd in test_readme.shell_commands(body):
            if cmd.startswith("curl "):
                out.append((cmd, want))
    return out


def test_http_examples(server):
    examples = http_examples()
    assert len(examples) >= 5, examples
    test_readme.run_curl(server, [c for c, want in examples if want is None])
    for cmd, want in examples:
        if want is None:
            continue
        run = cmd.replace(test_readme.DEFAULT, server.url).replace(
            "curl ", "curl -w '\\n%{http_code}' ", 1)
        p = subprocess.run(["bash", "-c", run], capture_output=True, timeout=60)
        assert p.returncode == 0, (cmd, p.stderr[-300:])
        body, _, status = p.stdout.rpartition(b"\n")
        got = json.loads(body)
        assert int(status) == want["status"], (cmd, status, body)
        for key in ("type", "title", "status", "field"):
            assert got.get(key) == want.get(key), (cmd, key, got, want)
        assert got["detail"] == got["error"], got
