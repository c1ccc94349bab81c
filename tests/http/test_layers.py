"""test_layers.py: dependencies point one way (docs/internals/layers.md).

The table of docs/internals/layers.md says which part of lib/ and server/
may use which.  These tests read every `#include "..."` line of lib/ and
server/ and every use of a function or global variable that one part defines
and another uses, and fail on any that runs against the table, naming the
file and line.  No server and no compiler are needed.

Tests follow tests/http/run.py's convention; run alone with
    /usr/bin/python3 tests/http/run.py tests/http/test_layers.py
"""

import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DOC = os.path.join(ROOT, "docs", "internals", "layers.md")

# Where the compiler looks for a quoted include after the including file's
# own directory (the Makefile's -I flags for lib/ and server/).
INCLUDE_DIRS = ["server", "lib/include", "lib/src"]
SOURCE_EXT = (".c", ".h", ".def")


def rules(text=None):
    """{part: set of parts it may use}, from the table of
    docs/internals/layers.md."""
    if text is None:
        with open(DOC, encoding="utf-8") as f:
            text = f.read()
    sec = text.split("## The rules", 1)[1]
    out = {}
    for m in re.finditer(r"^\|\s*([a-z]+)\s*\|([^|\n]*)\|\s*$", sec, re.M):
        if m.group(1) == "part":
            continue
        out[m.group(1)] = {p.strip() for p in m.group(2).split(",")
                           if p.strip()}
    return out


def part_of(path):
    """The part a repository path belongs to, or None outside lib/ and
    server/."""
    p = path.replace(os.sep, "/")
    if p.startswith("lib/include/"):
        return "header"
    if p.startswith("lib/src/kernels/"):
        return "kernels"
    if p.startswith("lib/src/"):
        return "library"
    if p in ("server/srv.h", "server/routes.def"):
        return "seams"
    if p == "server/main.c":
        return "main"
    m = re.match(r"server/([^/]+)/", p)
    return m.group(1) if m else None


def sources():
    """Repository paths of the C sources and headers of lib/ and server/."""
    out = []
    for top in ("lib", "server"):
        for d, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs.sort()
            for f in sorted(files):
                if f.endswith(SOURCE_EXT):
                    out.append(os.path.relpath(os.path.join(d, f), ROOT))
    return out


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def strip_c(text):
    """text with comments, string and character literals blanked out (line
    breaks kept, so line numbers stay right)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"'
                  r"|'(?:\\.|[^'\\\n])*'", blank, text, flags=re.S)


def resolve(path, target, exists=None):
    """The repository path a quoted include of `target` in `path` names, or
    None when it is not a file of lib/ or server/ (a system header)."""
    exists = exists or (lambda p: os.path.isfile(os.path.join(ROOT, p)))
    for base in [os.path.dirname(path)] + INCLUDE_DIRS:
        cand = os.path.normpath(os.path.join(base, target))
        if exists(cand):
            return cand.replace(os.sep, "/")
    return None


def include_errors(path, text, allowed, exists=None):
    """'file:line: ...' for each quoted include of text (the file `path`)
    that the part of path may not use."""
    src = part_of(path)
    errors = []
    for i, line in enumerate(text.split("\n"), 1):
        m = re.match(r'\s*#\s*include\s*"([^"]+)"', line)
        if not m:
            continue
        target = resolve(path, m.group(1), exists)
        dst = part_of(target) if target else None
        if dst is None or dst == src or dst in allowed.get(src, ()):
            continue
        errors.append("%s:%d: %s includes %s (%s), which it may not use"
                      % (path, i, src, target, dst))
    return errors


# A definition at file scope: a function (its body follows the parameter
# list) or a variable, not static.
FUNC_DEF = re.compile(r"^(?!static\b|typedef\b|extern\b|return\b|else\b)"
                      r"[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*"
                      r"\([^;{}]*\)\s*(?:__attribute__\s*\(\(.*?\)\)\s*)?\{",
                      re.M | re.S)
VAR_DEF = re.compile(r"^(?!static\b|typedef\b|extern\b|return\b)"
                     r"(?:struct\s+\w+|[A-Za-z_]\w*)[\s\*]+([A-Za-z_]\w*)\s*"
                     r"(?:\[[^\]]*\]\s*)?(?:=[^;]*)?;", re.M)


def definitions(files):
    """{name: part} for the non-static functions and variables the .c files
    of `files` ({path: stripped text}) define.  What the public header
    declares is the header's: the API is used through it."""
    owner = {}
    for path, text in files.items():
        if not path.endswith(".c"):
            continue
        for rx in (FUNC_DEF, VAR_DEF):
            for m in rx.finditer(text):
                owner.setdefault(m.group(1), part_of(path))
    public = set()
    for path, text in files.items():
        if part_of(path) == "header":
            public |= set(re.findall(r"\b[A-Za-z_]\w*\b", text))
    for name in public & set(owner):
        owner[name] = "header"
    return owner


def use_errors(path, text, owner, allowed):
    """'file:line: ...' for each use in text (stripped) of a name that a part
    the part of path may not use defines."""
    src = part_of(path)
    errors = []
    for i, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("#"):
            continue                     # includes are include_errors' job
        # A struct, union or enum tag is a type, not the function of the
        # same name (struct ab__kernels, ab__kernels()).
        for m in re.finditer(r"(?<!struct )(?<!union )(?<!enum )"
                             r"\b[A-Za-z_]\w*\b", line):
            dst = owner.get(m.group(0))
            if dst and dst != src and dst not in allowed.get(src, ()):
                errors.append("%s:%d: %s uses %s of %s, which it may not use"
                              % (path, i, src, m.group(0), dst))
    return errors


def test_every_part_has_a_row():
    allowed = rules()
    unknown = sorted({part_of(p) for p in sources()} - set(allowed))
    assert not unknown, ("parts without a row in docs/internals/layers.md: %s"
                         % ", ".join(unknown))
    for src, dsts in allowed.items():
        assert dsts <= set(allowed), "%s may use unknown parts %s" % (
            src, dsts - set(allowed))


def test_no_include_runs_upwards():
    allowed = rules()
    errors = []
    for path in sources():
        errors += include_errors(path, read(path), allowed)
    assert not errors, "\n".join(errors)


def test_no_call_runs_upwards():
    allowed = rules()
    files = {p: strip_c(read(p)) for p in sources()}
    owner = definitions(files)
    # Every part defines something: the scan finds definitions.
    assert {"srv_codec_encode", "srv_call_prepare", "ab_rope_apply"} <= \
        set(owner), "the definition scan found too little"
    errors = []
    for path, text in files.items():
        if part_of(path) == "seams":
            continue                     # declares every part's functions
        errors += use_errors(path, text, owner, allowed)
    assert not errors, "\n".join(errors)


def test_the_checks_catch_a_wrong_way():
    """The checks on made-up files: a codec including http/, a kernel
    including the library's header, a handler calling into the call."""
    allowed = rules()
    files = {"server/http/http.h", "lib/src/ab-internal.h",
             "lib/include/attnbias.h", "server/codec/codec-internal.h"}
    exists = files.__contains__
    e = include_errors("server/codec/x.c", '#include "codec-internal.h"\n'
                       '\n#include "http/http.h"\n', allowed, exists)
    assert e == ["server/codec/x.c:3: codec includes server/http/http.h "
                 "(http), which it may not use"], e
    e = include_errors("lib/src/kernels/k.h", '#include "../ab-internal.h"\n',
                       allowed, exists)
    assert len(e) == 1 and e[0].startswith("lib/src/kernels/k.h:1: kernels"), e
    e = include_errors("lib/src/kernels/k.h", '#include "attnbias.h"\n',
                       allowed, exists)
    assert len(e) == 1 and "(header)" in e[0], e
    owner = definitions({"server/call/c.c": strip_c(
        "int srv_call_thing(struct srv_call *c)\n{\n  return 0;\n}\n")})
    assert owner == {"srv_call_thing": "call"}, owner
    text = strip_c("/* srv_call_thing in a comment is fine */\n"
                   "int f(void) { return srv_call_thing(0); }\n")
    e = use_errors("server/handlers/h.c", text, owner, allowed)
    assert e == ["server/handlers/h.c:2: handlers uses srv_call_thing of "
                 "call, which it may not use"], e
    assert use_errors("server/http/h.c", text, owner, allowed) == []
