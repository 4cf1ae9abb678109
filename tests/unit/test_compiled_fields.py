"""Each extension type of the compiled modules has the same attributes in both forms.

A pure-mode class decorated ``@cython.cclass`` is a C struct when compiled: its
attributes are the fields its ``.pxd`` declares (or its body, with
``cython.declare``/annotations), and setting any other one raises AttributeError.
Interpreted, it is a plain class, which takes any attribute unless ``__slots__``
says otherwise.  So a field missing from ``__slots__`` breaks the Python path only,
and an attribute the compiled form lacks breaks the build only: the tests of one
path pass while the other fails in production.  Compared here, by reading the texts
(no build needed):

* a class with ``__slots__``: the slots are exactly its C fields;
* a class without: the attributes its ``__init__`` sets (itself or by the methods
  it calls) are exactly its C fields
  (a field left out would read as None, or 0, compiled and be missing interpreted);
  a class whose compiled form keeps a ``__dict__`` (``cdef dict __dict__``: Core)
  declares only its hot attributes, so each field must be set by ``__init__``.

``protocol/_resp.pyx`` is compiled only (its Python twin is another module with
its own layout): Cython itself refuses a field it does not declare, so it is not
compared here.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from streamdb.compiled import COMPILED_SOURCES

ROOT = Path(__file__).resolve().parents[2]
PURE_MODE_SOURCES = [s for s in COMPILED_SOURCES if s.endswith(".py")]

_CDEF_CLASS = re.compile(r"^cdef class (\w+)")
# A field line of a cdef class: "cdef [public|readonly] <type> a, b, c" (no "(":
# those are methods).
_CDEF_FIELD = re.compile(r"^\s+cdef\s+(?:public\s+|readonly\s+)?([^(]*)$")


@dataclass
class CClass:
    """One ``@cython.cclass`` of a source, as its texts declare it."""
    name: str
    fields: set[str] = field(default_factory=set)     # C fields (.pxd and the class body)
    has_dict: bool = False                              # cdef dict __dict__
    slots: tuple[str, ...] | None = None
    init_sets: set[str] = field(default_factory=set)   # self.<name> = ... in __init__


def pxd_fields(text: str) -> dict[str, tuple[set[str], bool]]:
    """The fields of each ``cdef class`` of a .pxd text, and whether it keeps a __dict__."""
    fields: dict[str, set[str]] = {}
    with_dict: set[str] = set()
    current = None
    for line in text.splitlines():
        line = line.split("#", 1)[0].rstrip()
        if not line:
            continue
        start = _CDEF_CLASS.match(line)
        if start:
            current = start.group(1)
            fields[current] = set()
            continue
        if not line[0].isspace():
            current = None              # the class body ended (a decorator, a function)
            continue
        m = _CDEF_FIELD.match(line)
        if current is None or m is None:
            continue
        # "<type> a, b, c": the first chunk ends with the first name; a type may be
        # several words ("long long") or a pointer ("unsigned char* buf").
        chunks = [c.strip() for c in m.group(1).split(",")]
        names = [re.split(r"[\s*]+", chunks[0])[-1], *chunks[1:]]
        if names == ["__dict__"]:
            with_dict.add(current)
        else:
            fields[current].update(names)
    return {name: (names, name in with_dict) for name, names in fields.items()}


def _is_cclass(node: ast.ClassDef) -> bool:
    return any(ast.unparse(d) == "cython.cclass" for d in node.decorator_list)


def _declared_in_body(node: ast.ClassDef) -> set[str]:
    """Fields declared in the class body: ``x: type`` and ``x = cython.declare(...)``."""
    names = set()
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and stmt.value is None \
                and isinstance(stmt.target, ast.Name):
            names.add(stmt.target.id)
        elif isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) \
                and ast.unparse(stmt.value.func) == "cython.declare":
            names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
    return names


def _set_by_init(node: ast.ClassDef) -> set[str]:
    """``self.<name> = ...`` in ``__init__`` and the methods it calls on ``self``
    (Stats.__init__ calls reset)."""
    methods = {s.name: s for s in node.body if isinstance(s, ast.FunctionDef)}
    todo, seen, names = ["__init__"], set(), set()
    while todo:
        name = todo.pop()
        if name in seen or name not in methods:
            continue
        seen.add(name)
        for sub in ast.walk(methods[name]):
            if isinstance(sub, ast.Call) and _on_self(sub.func):
                todo.append(sub.func.attr)
            targets = sub.targets if isinstance(sub, ast.Assign) else \
                [sub.target] if isinstance(sub, (ast.AnnAssign, ast.AugAssign)) else []
            for target in targets:
                names.update(t.attr for t in (target.elts if isinstance(target, ast.Tuple)
                                              else [target]) if _on_self(t))
    return names


def _on_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
        and node.value.id == "self"


def _slots(node: ast.ClassDef) -> tuple[str, ...] | None:
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__slots__" for t in stmt.targets):
            return tuple(ast.literal_eval(stmt.value))
    return None


def cclasses(source: str, pxd: str | None) -> list[CClass]:
    """The cclasses of a pure-mode source, with what its .pxd text declares of them."""
    declared = pxd_fields(pxd) if pxd is not None else {}
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and _is_cclass(node):
            fields, has_dict = declared.pop(node.name, (set(), False))
            found.append(CClass(node.name, fields | _declared_in_body(node), has_dict,
                                _slots(node), _set_by_init(node)))
    if declared:
        raise AssertionError(f"the .pxd declares cdef classes its source lacks: {sorted(declared)}")
    return found


def mismatches(cls: CClass) -> list[str]:
    """What differs between the compiled and the interpreted attributes of ``cls``."""
    if cls.slots is not None:
        wrong = []
        if len(set(cls.slots)) != len(cls.slots):
            wrong.append(f"{cls.name}.__slots__ names a field twice")
        if set(cls.slots) - cls.fields:
            wrong.append(f"{cls.name}.__slots__ has {sorted(set(cls.slots) - cls.fields)}, "
                         "which are not C fields")
        if cls.fields - set(cls.slots):
            wrong.append(f"{cls.name}'s C fields {sorted(cls.fields - set(cls.slots))} "
                         "are not in its __slots__")
        return wrong
    wrong = []
    if cls.fields - cls.init_sets:
        wrong.append(f"{cls.name}'s C fields {sorted(cls.fields - cls.init_sets)} are not "
                     "set by its __init__")
    if not cls.has_dict and cls.init_sets - cls.fields:
        wrong.append(f"{cls.name}.__init__ sets {sorted(cls.init_sets - cls.fields)}, "
                     "which are not C fields")
    return wrong


def _module_cclasses(source: str) -> list[CClass]:
    path = ROOT / source
    pxd = path.with_suffix(".pxd")
    return cclasses(path.read_text(), pxd.read_text() if pxd.exists() else None)


@pytest.mark.parametrize("source", PURE_MODE_SOURCES)
def test_cclass_fields_match_their_python_form(source):
    for cls in _module_cclasses(source):
        assert not mismatches(cls), mismatches(cls)


def test_the_compiled_modules_have_cclasses_to_compare():
    """The reading above finds what it compares (a parser that found nothing would pass)."""
    found = {cls.name: cls for s in PURE_MODE_SOURCES for cls in _module_cclasses(s)}
    assert {"Client", "Ctx", "Node", "Stream", "CommandSpec", "Core", "TrimArgs"} <= set(found)
    assert found["Core"].has_dict and "keyspace" in found["Core"].fields
    assert {"id", "db", "resp", "last_ms"} <= found["Client"].fields


_SOURCE = '''
import cython

@cython.cclass
class Slotted:
    __slots__ = ("a", "b")

    def __init__(self):
        self.a = self.b = 1

@cython.cclass
class Plain:
    c: object

    def __init__(self):
        self.c = 1
        self.more()

    def more(self):
        self.d, self.e = 2, 3
'''

_PXD = '''
cdef class Slotted:
    cdef public object a   # a comment, b
    cdef readonly unsigned long long b
    cpdef method(self, x)
'''


def test_a_field_missing_on_either_side_is_a_mismatch():
    slotted, plain = cclasses(_SOURCE, _PXD)
    assert slotted.fields == {"a", "b"} and mismatches(slotted) == []
    assert plain.fields == {"c"} and plain.init_sets == {"c", "d", "e"}
    assert mismatches(plain) == ["Plain.__init__ sets ['d', 'e'], which are not C fields"]
    assert mismatches(cclasses(_SOURCE, _PXD + "    cdef int extra\n")[0]) == \
        ["Slotted's C fields ['extra'] are not in its __slots__"]
    assert mismatches(cclasses(_SOURCE, _PXD.replace(", b", "").replace("long b", "long x"))[0]) \
        == ["Slotted.__slots__ has ['b'], which are not C fields",
            "Slotted's C fields ['x'] are not in its __slots__"]
    with pytest.raises(AssertionError, match="Gone"):
        cclasses(_SOURCE, _PXD + "\ncdef class Gone:\n    cdef int x\n")
