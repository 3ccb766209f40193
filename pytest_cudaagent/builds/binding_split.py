"""A CUDA source that writes its own Python binding, split in two: the kernels on the header diet,
the binding compiled as C++ beside them.

Most published KernelBench solutions that build with `load_inline` write `PYBIND11_MODULE` in the
`.cu` itself (`functions=None`, or an empty C++ source). The binding names pybind11, which
torch/types.h does not declare, so the header diet refused the whole source and nvcc parsed all of
torch/extension.h three times (#41). Here the source is cut in two:

- the kernels: the source with the `PYBIND11_MODULE` block blanked out line for line (every other
  line at its own number), compiled by nvcc through the diet's copies like any other source;
- the binding: `#include <torch/extension.h>`, the source's namespace aliases and
  using-directives, a declaration of each of the source's functions the block names (its own
  definition's head, `#line`d to it), then the block as written (`#line`d to it); compiled with
  the C++ compiler and flags torch's ninja file compiles the extension's C++ with (its `cflags`,
  which carry the shared precompiled header of torch/extension.h where there is one).

The two objects are linked into the one object ninja asked for (`ld -r`). The split is tried only
where it cannot change what the source means, else the source is compiled as written: one block,
at file scope, outside any `#if`; no raw string, no `#undef`; no macro of the source's own named in
the block or in a declaration it needs; each function it names defined once or more at file scope
with external linkage (no static, inline, template, constexpr, CUDA qualifier). A name the block
uses that the binding cannot see fails its compile (then the source compiles as written), and every
function the binding calls must be defined by the kernels' object (its symbol, checked with `nm`).
Stdlib only: imported by split_nvcc.py run as a file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

try:
    from .header_diet import DEFINE, IDENTIFIER, RAW_STRING, line_directive
except ImportError:  # run as a file beside split_nvcc.py (torch's ninja runs it so)
    from header_diet import DEFINE, IDENTIFIER, RAW_STRING, line_directive

BLOCK_START = re.compile(r"\bPYBIND11_MODULE\s*\(")
UNDEF = re.compile(r"^[ \t]*#[ \t]*undef\b", re.M)
OPENS_CONDITIONAL = re.compile(r"^[ \t]*#[ \t]*if(n?def)?\b", re.M)
CLOSES_CONDITIONAL = re.compile(r"^[ \t]*#[ \t]*endif\b", re.M)
# File-scope statements the binding takes too: namespace aliases and using-directives/declarations.
CARRIED = re.compile(r"^\s*(namespace\s+\w+\s*=\s*[\w:]+|using\s+namespace\s+[\w:]+|using\s+[\w:]+(\s*=\s*[^;{}]+)?)\s*;$",
                     re.S)
PYBIND11_ALIAS = re.compile(r"^\s*namespace\s+\w+\s*=\s*(::)?pybind11\s*;$")
# A definition whose head has one of these cannot be declared in another translation unit, or
# is not a host function with external linkage.
NOT_DECLARABLE = re.compile(r"\b(static|inline|template|constexpr|consteval|__global__|__device__|__forceinline__"
                            r"|__host__|operator)\b|\[\[")
NOT_A_FUNCTION = re.compile(r"^\s*(struct|class|union|enum|namespace|extern\s*\"C\"\s*$|typedef)\b|=\s*$")
BINDING_INCLUDE = "#include <torch/extension.h>"


@dataclass
class Split:
    kernels: str  # the source less the block, line for line
    binding: str  # the C++ translation unit of the block
    declared: list[str] = field(default_factory=list)  # the source's functions the binding names


def _code_mask(text: str) -> str:
    """`text` with comments, string and character literals blanked (newlines kept), so braces,
    parentheses and names are found only in code; preprocessor lines are kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _matching(mask: str, start: int, opening: str, closing: str) -> int:
    """The index just past the bracket that closes the one at `start`, or -1."""
    depth = 0
    for index in range(start, len(mask)):
        if mask[index] == opening:
            depth += 1
        elif mask[index] == closing:
            depth -= 1
            if depth == 0:
                return index + 1
    return -1


def _file_scope_statements(mask: str) -> list[tuple[int, int, str]]:
    """(start, end, kind) of each file-scope statement: kind "{" for one that opens a body at file
    scope (its head is mask[start:end], end at the brace), ";" for one ending there. Preprocessor
    lines end a statement."""
    found, depth, start, index, n = [], 0, 0, 0, len(mask)
    while index < n:
        c = mask[index]
        if depth == 0 and c == "#" and mask[start:index].strip() == "":
            end = index
            while True:  # to the end of the directive, across continued lines
                end = mask.find("\n", end)
                if end < 0 or mask[end - 1] != "\\":
                    break
                end += 1
            index = n if end < 0 else end
            start = index
            continue
        if c == "{":
            if depth == 0:
                found.append((start, index, "{"))
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                start = index + 1
        elif c == ";" and depth == 0:
            found.append((start, index + 1, ";"))
            start = index + 1
        index += 1
    return found


def _function_name(head: str) -> str | None:
    """The name a function definition's head declares (the identifier before its first
    parenthesis at depth 0), or None when the head is no function's."""
    if NOT_A_FUNCTION.search(head):
        return None
    paren = head.find("(")
    if paren < 0 or _matching(head, paren, "(", ")") < 0:
        return None
    name = re.search(r"([A-Za-z_]\w*)\s*$", head[:paren])
    if name is None or name.group(1) in {"if", "for", "while", "switch", "return", "sizeof", "decltype"}:
        return None
    return name.group(1)


def split(text: str, original_path: str) -> Split | str:
    """The two translation units of a source with its binding in it, or why it is compiled as written."""
    if RAW_STRING.search(text):
        return "a raw string literal"
    mask = _code_mask(text)
    blocks = list(BLOCK_START.finditer(mask))
    if len(blocks) != 1:
        return f"{len(blocks)} PYBIND11_MODULE blocks"
    start = blocks[0].start()
    if UNDEF.search(mask):
        return "an #undef"
    before = mask[:start]
    if len(OPENS_CONDITIONAL.findall(before)) != len(CLOSES_CONDITIONAL.findall(before)):
        return "the binding is inside an #if"
    statements = _file_scope_statements(mask)
    block = next(((s, e) for s, e, kind in statements if kind == "{" and s <= start < e), None)
    if block is None or mask[block[0]:start].strip():
        return "the binding is not at file scope"
    end = _matching(mask, block[1], "{", "}")
    if end < 0:
        return "the binding's block does not close"
    block_line = text.count("\n", 0, start) + 1
    blanked = [(start, end)]  # what the kernels' copy leaves out, kept as blank lines
    block_names = set(IDENTIFIER.findall(_code_mask(text[start:end])))
    own_macros = {match.group(1) for match in DEFINE.finditer(mask)}
    carried, definitions = [], {}
    for s, e, kind in statements:
        if s == block[0]:
            continue
        head = text[s:e].strip()
        if kind == ";" and CARRIED.match(mask[s:e]):
            carried.append(head)
            if PYBIND11_ALIAS.match(mask[s:e]):  # `namespace py = pybind11;`: the binding's alone
                blanked.append((s, e))
        elif kind == "{":
            name = _function_name(mask[s:e])
            if name in block_names:
                first = s + len(text[s:e]) - len(text[s:e].lstrip())  # where the head's text begins
                definitions.setdefault(name, []).append((text.count("\n", 0, first) + 1, head, mask[s:e]))
    if not definitions:
        return "the binding names none of the source's functions"
    declarations = []
    for name, heads in sorted(definitions.items()):
        for line, head, head_mask in heads:
            refused = NOT_DECLARABLE.search(head_mask)
            if refused:
                return f"{name} is {refused.group(0)}"
            macro = next((word for word in IDENTIFIER.findall(head_mask) if word in own_macros), None)
            if macro:
                return f"{name}'s declaration names the source's macro {macro}"
            declarations.append(f"{line_directive(line, original_path)}\n{head}\n;")  # after a // comment too
    macro = next((word for word in sorted(block_names) if word in own_macros), None)
    if macro:
        return f"the binding names the source's macro {macro}"
    kernels = text
    for s, e in blanked:
        kernels = kernels[:s] + re.sub(r"[^\n]", " ", kernels[s:e]) + kernels[e:]
    binding = "\n".join([BINDING_INCLUDE, *carried, *declarations, line_directive(block_line, original_path),
                         text[start:end], ""])
    return Split(kernels, binding, sorted(definitions))


# -- the binding's compile, as torch's ninja file compiles the extension's C++ ------------------

NINJA_VARIABLE = re.compile(r"^(cxx|cflags|post_cflags)[ \t]*=[ \t]?(.*)$", re.M)


def _ninja_unescaped(value: str) -> str:
    return re.sub(r"\$([$ :])", r"\1", value)


def cxx_command(build_directory: str) -> list[str] | str:
    """The command torch's ninja file compiles C++ with (`$cxx -MMD -MF $out.d $cflags -c $in -o
    $out $post_cflags`, less the depfile, input and output), read from `build.ninja` in the build
    directory (ninja runs the compile there); or why none."""
    import os
    import shlex

    path = os.path.join(build_directory, "build.ninja")
    try:
        with open(path, encoding="utf-8") as file:
            found = {name: _ninja_unescaped(value) for name, value in NINJA_VARIABLE.findall(file.read())}
    except (OSError, UnicodeDecodeError) as error:
        return f"no ninja file to read the C++ flags from ({error.__class__.__name__})"
    if "cxx" not in found:
        return "the ninja file names no C++ compiler"
    try:
        return [*shlex.split(found["cxx"]), *shlex.split(found.get("cflags", "")), *shlex.split(found.get("post_cflags", ""))]
    except ValueError as error:
        return f"the ninja file's C++ flags do not parse: {error}"


def unresolved(binding_symbols: list[tuple[str, str]], kernel_symbols: list[tuple[str, str]], declared: list[str]) -> list[str]:
    """The binding's undefined symbols of the source's functions (`declared`: their C++ names
    mangled `_Z<length><name>...`, or the plain name of an extern "C" one) that the kernels'
    object does not define. Symbols as `nm -P` lists them: (name, type)."""
    defined = {name for name, kind in kernel_symbols if kind in "TtWw" and kind.isupper()}
    prefixes = tuple(f"_Z{len(name)}{name}" for name in declared)
    return [name for name, kind in binding_symbols
            if kind == "U" and (name in declared or name.startswith(prefixes)) and name not in defined]


def nm_symbols(object_path: str) -> list[tuple[str, str]]:
    import subprocess

    listed = subprocess.run(["nm", "-P", object_path], capture_output=True, text=True, check=True).stdout
    return [(parts[0], parts[1]) for parts in (line.split() for line in listed.splitlines()) if len(parts) >= 2]
