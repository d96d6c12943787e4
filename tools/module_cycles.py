#!/usr/bin/env python3
"""The import graph of src/ and its cycles.

    python3 tools/module_cycles.py [ROOT] [--inside MOD ...]

Reads every `crate::`, `super::` and `self::` path outside tests (files named tests.rs or
*_tests.rs, folders named tests, the `#[cfg(test)] mod tests { ... }` block at a file's end,
and the `testing` module, which exists for tests). Prints the edges between top-level modules
and, for each module named with --inside, the edges between its direct children. Exits 1 when
there is a cycle between top-level modules or between the children of an --inside module.
"""

import os
import re
import sys

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)(::\{)?")


def module_of(rel):
    """src-relative file path -> module path (a list of names)."""
    parts = rel[:-3].split("/")
    if parts[-1] == "mod":
        parts = parts[:-1]
    return parts


def is_test_file(rel):
    parts = rel.split("/")
    name = parts[-1]
    return name == "tests.rs" or name.endswith("_tests.rs") or "tests" in parts[:-1]


def strip_tests_and_comments(text):
    cut = text.find("#[cfg(test)]\nmod tests {")
    if cut >= 0:
        text = text[:cut]
    lines = []
    skip_next_item = False
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith("//"):
            continue
        # A `#[cfg(test)]` item of one line (`mod tests;`, a `use`) is not a dependency.
        if skip_next_item:
            skip_next_item = False
            if stripped.endswith(";"):
                continue
        if stripped == "#[cfg(test)]":
            skip_next_item = True
            continue
        lines.append(line)
    return "\n".join(lines)


def brace_items(text, start):
    """The paths inside a `{...}` group that starts at text[start] == '{', one level deep
    expanded recursively: `{a, b::{c, d}}` -> ['a', 'b::c', 'b::d']."""
    depth, i, item, items = 0, start, "", []
    while i < len(text):
        ch = text[i]
        if ch == "{":
            depth += 1
            if depth > 1:
                # Nested group: expand it with the prefix gathered so far.
                inner, end = brace_items(text, i)
                prefix = item.strip()
                items.extend(prefix + x for x in inner)
                item = ""
                i = end
                continue
        elif ch == "}":
            depth -= 1
            if depth == 0:
                if item.strip():
                    items.append(item.strip())
                return items, i + 1
        elif ch == "," and depth == 1:
            if item.strip():
                items.append(item.strip())
            item = ""
        elif depth >= 1:
            item += ch
        i += 1
    return items, i


def references(text, here):
    """Absolute module paths (lists) that the text of module `here` names."""
    for match in PATH.finditer(text):
        base, rest, group = match.group(1), match.group(2), match.group(3)
        names = rest.split("::")[1:]
        if base == "crate":
            start = []
        elif base == "self":
            start = list(here)
        else:
            start = list(here[:-1])
            while names and names[0] == "super":
                names = names[1:]
                start = start[:-1]
        if group:
            items, _ = brace_items(text, match.end() - 1)
            for item in items:
                extra = [n for n in re.split(r"::|\s+as\s+", item) if n][:1]
                if extra and extra[0] != "self":
                    yield start + names + item.split(" as ")[0].split("::")
                else:
                    yield start + names
        else:
            yield start + names


def is_module(src, path):
    base = os.path.join(src, *path)
    return os.path.isfile(base + ".rs") or os.path.isdir(base)


def graph(root):
    src = os.path.join(root, "src")
    top, inside = {}, {}
    for folder, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, src)
            if is_test_file(rel):
                continue
            here = module_of(rel)
            if here[0] in ("lib", "main", "testing"):
                continue
            with open(path) as f:
                text = strip_tests_and_comments(f.read())
            for target in references(text, here):
                if not target or target[0] in ("testing",):
                    continue
                if target[0] != here[0]:
                    top.setdefault(here[0], set()).add(target[0])
                elif (
                    len(here) > 1
                    and len(target) > 1
                    and here[1] != target[1]
                    and is_module(src, target[:2])
                ):
                    inside.setdefault(here[0], {}).setdefault(here[1], set()).add(target[1])
    return top, inside


def cycles(edges):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    nodes = set(edges) | {w for targets in edges.values() for w in targets}
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return found


def main(argv):
    args = argv[1:]
    inside_of = []
    if "--inside" in args:
        at = args.index("--inside")
        inside_of = args[at + 1 :]
        args = args[:at]
    root = args[0] if args else "."
    top, inside = graph(root)
    failed = False
    for module in sorted(top):
        print(f"{module} -> {', '.join(sorted(top[module]))}")
    for component in cycles(top):
        print(f"cycle between top-level modules: {' <-> '.join(component)}")
        failed = True
    for module in inside_of:
        edges = inside.get(module, {})
        for child in sorted(edges):
            print(f"  {module}::{child} -> {', '.join(sorted(edges[child]))}")
        for component in cycles(edges):
            print(f"cycle inside {module}/: {' <-> '.join(component)}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
