"""YAML from users, read with limits: a file size cap, no duplicate keys, bounded nesting and a
bounded expansion of aliases (a 1 KB "billion laughs" file must not become gigabytes).

PyYAML's safe loader accepts duplicate keys (the last wins, silently) and shares aliased nodes,
so a small file can describe an exponentially large tree that later code walks. Here the node
graph is checked before any Python object is built.
"""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from .errors import UserInputError

_DECIMAL = re.compile(r"[+-]?(0|[1-9][0-9]*)")
"""An integer as a person reads it; YAML 1.1 also reads 010 (octal 8), 0x10, 1_000 and 1:30 (90)."""
MAX_FILE_BYTES = 1 << 20
"""Largest input file read (1 MiB): scenario and configuration files are a few KB."""
MAX_DEPTH = 64
"""Deepest nesting of mappings and lists accepted."""
MAX_EXPANDED_NODES = 100_000
"""Most nodes the document may expand to once every alias is followed."""


def _check(node, field: str, source: str) -> None:
    """Duplicate keys, depth and expanded size of a composed node graph, iteratively."""
    sizes: dict[int, int] = {}
    stack = [(node, 0, False)]
    while stack:
        n, depth, done = stack.pop()
        if depth > MAX_DEPTH:
            raise UserInputError(field, source, f"YAML nested at most {MAX_DEPTH} levels deep")
        kids = []
        if isinstance(n, yaml.MappingNode):
            seen = set()
            for k, v in n.value:
                if isinstance(k, yaml.ScalarNode):
                    if k.value in seen:
                        raise UserInputError(field, source, f"YAML without duplicate keys ({k.value!r} twice, line "
                                                            f"{k.start_mark.line + 1})")
                    seen.add(k.value)
                kids += [k, v]
        elif isinstance(n, yaml.SequenceNode):
            kids = list(n.value)
        elif n.tag == "tag:yaml.org,2002:int" and not _DECIMAL.fullmatch(n.value):
            raise UserInputError(field, source, f"numbers written with the digits 0-9 ({n.value!r} on line "
                                                f"{n.start_mark.line + 1} is YAML 1.1 octal, hex, _ or : notation)")
        if done:
            sizes[id(n)] = 1 + sum(sizes[id(c)] for c in kids)
            if sizes[id(n)] > MAX_EXPANDED_NODES:
                raise UserInputError(field, source, f"YAML expanding to at most {MAX_EXPANDED_NODES:,} nodes "
                                                    "(aliases included)")
            continue
        if id(n) in sizes:
            continue
        stack.append((n, depth, True))
        stack += [(c, depth + 1, False) for c in kids if id(c) not in sizes]


def load_text(text: str, field: str, source: str | None = None):
    """Parse YAML text from a user within the limits; a limit broken is a UserInputError naming
    ``field`` and ``source``; malformed YAML raises yaml.YAMLError as yaml.safe_load does."""
    source = text[:60] if source is None else source
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is None:
            return None
        _check(node, field, source)
        return yaml.SafeLoader("").construct_document(node)
    except RecursionError:
        raise UserInputError(field, source, f"YAML nested at most {MAX_DEPTH} levels deep") from None
    except UserInputError:
        raise
    except (ValueError, TypeError, OverflowError) as e:   # a tag's constructor refused the value (!!int abc)
        raise UserInputError(field, source, f"YAML whose tagged values construct ({type(e).__name__})") from None


def read_file(path: str | Path, field: str) -> str:
    """A user's text file, at most MAX_FILE_BYTES, as UTF-8."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise UserInputError(field, str(path), f"a readable file ({e.strerror})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise UserInputError(field, str(path), f"a file of at most {MAX_FILE_BYTES // 1024} KiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UserInputError(field, str(path), "a UTF-8 text file") from None


def load_file(path: str | Path, field: str):
    """A user's YAML file read and parsed within the limits; malformed YAML is a UserInputError
    naming ``field``, the path and the line (``--scenario``, ``--params``)."""
    try:
        return load_text(read_file(path, field), field, str(path))
    except yaml.YAMLError as e:
        line = getattr(getattr(e, "problem_mark", None), "line", None)
        where = f" (line {line + 1})" if line is not None else ""
        raise UserInputError(field, str(path), f"valid YAML{where}") from None
