"""Bounded YAML loading of one manifest file: size, nesting depth and alias expansion.

A manifests folder is input like any other: a file that is too big, nested too deep or an
alias bomb ("billion laughs") is refused with a reason before it costs unbounded memory,
time or stack, instead of being found out by the process running out of one of them.
With libyaml 0.2.6 or later (the one PyYAML's wheels carry; it refuses flow and block
nesting past 1,000 levels in its scanner, so composing in C cannot overflow the C stack;
0.2.5, Debian 12's, bounds neither) a file is parsed and composed in C, and the limits are
then checked on the composed node graph, where an alias is a shared node, so checking costs
one visit per distinct node, before anything is constructed. A file that breaks a limit is
composed again by the Python composer below, which counts as it goes and names the
offending alias or level. With an older libyaml, libyaml parses and that composer composes
every file; without libyaml everything runs in Python. Every failure, whatever the parser
raised, is a `LoadError`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, Event
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from controlplane.source.folder_walk import kind

try:
    from yaml import CSafeLoader as _CSafeLoader
    from yaml._yaml import CParser as _EventSource
    from yaml._yaml import get_version as _libyaml_version

    C_COMPOSE = _libyaml_version() >= (0, 2, 6)
    """Compose in C: libyaml is there and bounds nesting itself."""
except ImportError:  # pragma: no cover - PyYAML without libyaml
    C_COMPOSE = False
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _EventSource(Reader, Scanner, Parser):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)


MAX_FILE_BYTES = 4 * 1024 * 1024
"""A larger file is refused unread (a Kubernetes object is at most ~1.5 MiB in etcd)."""
MAX_DEPTH = 100
"""Nesting levels of maps and lists; Kubernetes objects use about ten, CRD schemas ~40."""
MAX_ALIAS_NODES = 100_000
"""Nodes that aliases may add to one file, each alias counted at its expanded size."""


class LoadError(Exception):
    """A file that cannot be read as YAML documents; the message says why, in one line."""


class _BoundedComposer(Composer):
    """PyYAML's composer, counting nesting depth and what every alias expands to."""

    def __init__(self) -> None:
        super().__init__()
        self._depth = 0
        self._alias_nodes = 0
        self._sizes: dict[int, int] = {}  # id(node) -> expanded size, for this document
        self._open: set[str] = set()  # anchors of the maps and lists being composed

    if TYPE_CHECKING:  # provided by the parser this class is mixed with

        def check_event(self, *choices: type[Event]) -> bool: ...
        def peek_event(self) -> Any: ...

    def compose_document(self) -> Node | None:
        self._sizes = {}
        return super().compose_document()

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        if self.check_event(AliasEvent):
            anchor = self.peek_event().anchor
            if anchor in self._open:  # no Kubernetes object is cyclic
                raise LoadError(f"alias *{anchor} is used inside its own anchor")
            anchored = self.anchors.get(anchor)
            if anchored is not None:
                self._alias_nodes += self._size(anchored)
                if self._alias_nodes > MAX_ALIAS_NODES:
                    raise LoadError(f"aliases expand to more than {MAX_ALIAS_NODES} nodes")
            return super().compose_node(parent, index)
        anchor = self.peek_event().anchor
        self._depth += 1
        if anchor is not None:
            self._open.add(anchor)
        try:
            if self._depth > MAX_DEPTH:
                raise LoadError(f"nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
            if anchor is not None:
                self._open.discard(anchor)

    def _size(self, node: Node) -> int:
        """Nodes in the complete `node` once every alias in it is expanded (recursion is
        bounded by MAX_DEPTH; shared parts are counted once per use, computed once)."""
        known = self._sizes.get(id(node))
        if known is not None:
            return known
        size = 1
        if isinstance(node, SequenceNode):
            size += sum(self._size(child) for child in node.value)
        elif isinstance(node, MappingNode):
            size += sum(self._size(key) + self._size(value) for key, value in node.value)
        else:
            assert isinstance(node, ScalarNode)
        self._sizes[id(node)] = size
        return size


class _BoundedLoader(_BoundedComposer, _EventSource, SafeConstructor, Resolver):
    """yaml.SafeLoader's behaviour, with `_BoundedComposer`'s limits."""

    def __init__(self, stream: str) -> None:
        _EventSource.__init__(self, stream)
        _BoundedComposer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)


class _OverLimit(Exception):
    """The C-composed graph breaks a limit; the Python composer will say exactly where."""


def _check_graph(root: Node, alias_nodes: int) -> int:
    """`alias_nodes` plus what the aliases of the document `root` expand to, counted as
    `_BoundedComposer` counts them; raises _OverLimit past a limit or on a cycle.

    A node reached again is an alias of it (the first visit, in document order, is where it
    was written): it adds its expanded size and is not descended into again."""
    sizes: dict[int, int] = {}  # id(node) -> expanded size, once complete
    open_: set[int] = set()  # nodes being visited: meeting one again is a cycle
    total = alias_nodes

    def visit(node: Node, depth: int) -> int:
        nonlocal total
        known = sizes.get(id(node))
        if known is not None:  # an alias: counted at its expanded size
            total += known
            if total > MAX_ALIAS_NODES:
                raise _OverLimit(f"aliases expand to more than {MAX_ALIAS_NODES} nodes")
            return known
        if id(node) in open_:
            raise _OverLimit("an alias is used inside its own anchor")
        if depth > MAX_DEPTH:
            raise _OverLimit(f"nested deeper than {MAX_DEPTH} levels")
        size = 1
        if isinstance(node, SequenceNode | MappingNode):
            open_.add(id(node))
            if isinstance(node, SequenceNode):
                for child in node.value:
                    size += visit(child, depth + 1)
            else:
                for key, value in node.value:
                    size += visit(key, depth + 1) + visit(value, depth + 1)
            open_.discard(id(node))
        sizes[id(node)] = size
        return size

    visit(root, 1)
    return total


def _check_depth(root: Node) -> None:
    """The tree `root` (no shared node) within MAX_DEPTH levels, a level at a time."""
    level = [root]
    depth = 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            raise _OverLimit(f"nested deeper than {MAX_DEPTH} levels")
        below: list[Node] = []
        for node in level:
            if isinstance(node, MappingNode):
                for key, value in node.value:
                    below.append(key)
                    below.append(value)
            elif isinstance(node, SequenceNode):
                below.extend(node.value)
        level = below


_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_SCALARS = {
    f"tag:yaml.org,2002:{name}": getattr(SafeConstructor, f"construct_yaml_{name}")
    for name in ("null", "bool", "int", "float", "timestamp")
}
"""The other scalar tags a plain document resolves to, built by SafeConstructor's own
functions (each a function of its node alone)."""


class _NotPlain(Exception):
    """A node the plain construction leaves to SafeConstructor (a merge key, a set, ...)."""


def _construct_tree(loader: Any, root: Node) -> Any:
    """The document `root` (a tree: no alias, no shared node) as SafeConstructor builds
    it, without its per-node bookkeeping (recursion guard, generators, object cache: they
    serve aliases, which a tree has none of), 3-4x cheaper: a change's file is parsed once
    per change. Its depth is checked as it goes (_OverLimit past MAX_DEPTH levels), not in
    a pass of its own. Maps, lists and the plain scalars only, each as SafeConstructor makes it;
    anything else (merge keys, `=` values, sets, a key that is a map or a list, another
    tag) and every error, in whatever order, is SafeConstructor's, which builds the
    document again from the untouched nodes and raises what it raises."""
    scalars = _SCALARS

    def build(node: Node, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise _OverLimit(f"nested deeper than {MAX_DEPTH} levels")
        tag = node.tag
        kind = type(node)
        if kind is ScalarNode:
            if tag == _STR:
                return node.value
            make = scalars.get(tag)
            if make is None:
                raise _NotPlain
            return make(loader, node)
        if kind is MappingNode:
            if tag != _MAP:
                raise _NotPlain
            mapping = {}
            for key, value in node.value:
                if type(key) is not ScalarNode:  # a map or list key: unhashable
                    raise _NotPlain
                mapping[build(key, depth + 1)] = build(value, depth + 1)
            return mapping
        if kind is SequenceNode and tag == _SEQ:
            return [build(child, depth + 1) for child in node.value]
        raise _NotPlain

    try:
        return build(root, 1)
    except _OverLimit:
        raise
    except Exception:  # SafeConstructor decides (and says) what is wrong
        _check_depth(root)  # what `build` did not reach is checked before it recurses
        return loader.construct_document(root)


# Scalars up to this many characters have their implicit tag remembered (`_CLoader`), at
# most `_TAGS_MAX` of them (then forgotten all at once).
_TAGGED_MAX_CHARS = 64
_TAGS_MAX = 4096
_TAGS: dict[tuple[str, Any], str] = {}


if C_COMPOSE:

    class _CLoader(_CSafeLoader):
        """CSafeLoader that remembers the implicit tag of short scalars: libyaml calls
        Python's `Resolver.resolve` back for every node, which tries the implicit
        resolvers' regular expressions on each scalar (a sixth of a change's file's parse,
        most of its scalars the same keys and words as in every other file). For a scalar
        the tag depends on its value and `implicit` alone (SafeLoader has no path
        resolvers), so a remembered one is what resolving again gives."""

        def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
            if kind is not ScalarNode or len(value) > _TAGGED_MAX_CHARS:
                return super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
            key = (value, implicit)
            tag = _TAGS.get(key)
            if tag is None:
                tag = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
                if len(_TAGS) >= _TAGS_MAX:
                    _TAGS.clear()
                _TAGS[key] = tag
            return tag


def _load_c(text: str) -> list[Any]:
    """Documents parsed and composed by libyaml, each graph checked before construction."""
    loader = _CLoader(text)
    # Only an anchor (`&`) makes a node shared: without one the graph is a tree, and its
    # depth is the only limit to check, while it is constructed (4x cheaper than sizing
    # every node: a change's file at 8,000 Services is parsed once per change).
    anchored = "&" in text
    try:
        documents = []
        alias_nodes = 0
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            if anchored:
                alias_nodes = _check_graph(node, alias_nodes)
                document = loader.construct_document(node)
            else:  # its depth checked as it is built
                document = _construct_tree(loader, node)
            if document is not None:
                documents.append(document)
        return documents
    finally:
        loader.dispose()


def _load_python(text: str) -> list[Any]:
    """Documents composed in Python by `_BoundedComposer`, counting as it goes."""
    loader = _BoundedLoader(text)
    try:
        documents = []
        while loader.check_data():  # type: ignore[no-untyped-call]
            document = loader.get_data()
            if document is not None:
                documents.append(document)
        return documents
    finally:
        loader.dispose()


def load_text(text: str) -> list[Any]:
    """Every document of a YAML (or JSON) text, empty documents left out."""
    try:
        if C_COMPOSE:
            try:
                return _load_c(text)
            except _OverLimit as over:
                _load_python(text)  # raises the LoadError that names the alias or level
                raise LoadError(str(over)) from None
        return _load_python(text)
    except LoadError:
        raise
    except yaml.YAMLError as err:
        raise LoadError(_one_line(str(_without_snippets(err)))) from None
    except (ValueError, OverflowError, RecursionError, MemoryError) as err:
        # Scalars PyYAML fails to build (an integer of 5,000 digits, a 13th month).
        raise LoadError(_one_line(f"{type(err).__name__}: {err}")) from None


OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
"""O_NONBLOCK: opening a FIFO swapped in for a manifest must not wait for a writer (it
froze the folder source in `open` for good); what was opened is then checked by fstat."""


def load_file(path: Path) -> list[Any]:
    """The documents of the file at `path`, within the limits above. Only a regular file
    is read: the type is that of the opened file, not of the path looked at before (the
    path may have been replaced by a FIFO or a device in between)."""
    try:
        fd = os.open(path, OPEN_FLAGS)
    except OSError as err:
        raise LoadError(_one_line(f"cannot read: {err.strerror or err}")) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise LoadError(f"not a regular file ({kind(mode)}); not read")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as stream:
            data = stream.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        raise LoadError(_one_line(f"cannot read: {err.strerror or err}")) from None
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise LoadError(f"larger than {MAX_FILE_BYTES} bytes; not read")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise LoadError(f"not UTF-8 text: {err.reason} at byte {err.start}") from None
    return load_text(text)


def _without_snippets(err: yaml.YAMLError) -> yaml.YAMLError:
    """`err` without the quoted lines the Python parser puts under its marks: line and
    column say where, and the text there may be a Secret's key."""
    for name in ("context_mark", "problem_mark"):
        mark = getattr(err, name, None)
        if isinstance(mark, yaml.error.Mark):  # libyaml's marks carry no text
            mark.buffer = None
    return err


def _one_line(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[:limit]
