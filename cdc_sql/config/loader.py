"""Read YAML into plain values, remembering the line of every key path, and expand ${VAR}.

A pipeline file is data written by analysts, so it is read as plain data only: text, numbers,
true/false, lists and mappings. No aliases (`*name`: an alias bomb of a few lines expands to
billions of nodes), no tags beyond YAML's own scalar ones (`!!python/...`, `!foo`), no nesting
deeper than MAX_DEPTH, no more than MAX_BYTES of UTF-8: each is refused with the line it is on.

`${VAR}` expands only in the keys that configure connections and paths (INTERPOLATED), which
operators set per environment. Everywhere else (projections, sources, table names, keys...) `${`
is an error naming the key, before anything runs: the environment holds the job's secrets
(docs/security.md). Operators can narrow further which variables a pipeline may read
(ALLOWED_VARIABLES), and a password comes wholly from one variable, never from a default.
"""
from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cdc_sql.errors import MIN_HIDDEN, ConfigError, hide

_SCALARS = yaml.SafeLoader("")
_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")
INTERPOLATED = ("source.host", "source.port", "source.user", "source.password",
                "source.password_file", "source.server_id", "source.ssl.ca", "source.ssl.cert",
                "source.ssl.key", "target.path", "target.catalog", "target.schema",
                "engine.mode", "engine.url")
# Set by operators: the variables pipeline files may read, comma-separated names or prefixes
# ending in `*` (e.g. `CDC_*,MYSQL_PASSWORD`). Unset: any variable (in the keys above).
ALLOWED_VARIABLES = "CDC_SQL_PIPELINE_VARIABLES"
# Keys whose values are checked to be numbers or choices (a value that is not shows as the
# ${VAR} it came from): the variables' values in the others are never repeated in a message
# (errors.hide; defaults are written in the file, no secret)
_CHECKED = ("source.port", "source.server_id", "engine.mode")
MAX_BYTES = 4 * 2**20      # a pipeline of ten thousand tables is under 1 MB
MAX_DEPTH = 32             # pipeline files nest 4 levels deep
_YAML = "tag:yaml.org,2002:"
_PLAIN_TAGS = {f"{_YAML}{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq")}


@dataclass
class Document:
    """A parsed file: its values, and the line (1-based) where each key path starts."""

    file: str
    values: Any
    lines: dict[str, int]
    interpolated: frozenset[str] = frozenset()  # key paths whose value came through ${VAR}
    # what the file says at a key path where the value is not what it wrote: ${VAR} (never
    # shown expanded) and text that YAML typed (a timestamp, 0123, yes) for text keys
    texts: dict[str, str] = field(default_factory=dict)
    unset: dict[str, str] = field(default_factory=dict)  # offline: path -> unset variable

    def error(self, message: str, path: str) -> ConfigError:
        return ConfigError(message, self.file, path, self.line_of(path))

    def line_of(self, path: str) -> int | None:
        while path:
            if path in self.lines:
                return self.lines[path]
            shorter = re.sub(r"(\.[^.\[]+|\[\d+\])$", "", path)
            path = "" if shorter == path else shorter  # a top-level key has no parent to strip
        return self.lines.get("")


class _Loader(yaml.SafeLoader):
    """PyYAML's safe composer, refusing aliases, unknown tags and deep nesting."""

    depth = 0

    def compose_node(self, parent, index):
        _check(self.peek_event(), self.depth)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _check(event, depth: int) -> None:
    """Refuse, at a node's event `depth` collections deep, an alias, a tag of its own, or
    nesting past MAX_DEPTH."""
    if isinstance(event, yaml.AliasEvent):
        raise _refused(f"YAML aliases (*{event.anchor}) are not allowed in a pipeline "
                       f"file: write the value out", event)
    tag = getattr(event, "tag", None)
    if tag not in (None, "!") and tag not in _PLAIN_TAGS:
        shown = "!!" + tag[len(_YAML):] if tag.startswith(_YAML) else tag
        raise _refused(f"the YAML tag `{shown[:60]}` is not allowed: a pipeline file holds "
                       f"plain text, numbers, true/false, lists and mappings (remove the "
                       f"tag)", event)
    if depth >= MAX_DEPTH:
        raise _refused(f"nested more than {MAX_DEPTH} levels deep (a pipeline file "
                       f"nests 4)", event)


def _composed(text: str) -> yaml.Node | None:
    """The document's nodes, composed by libyaml where PyYAML has it (a pipeline of 10,000
    tables took 2.2 s to compose in Python) once its events pass `_check`; otherwise by
    `_Loader`: without libyaml, for a file libyaml or `_check` refuses, and for one holding
    a character PyYAML's reader refuses (so that the message is PyYAML's own, as ever)."""
    if yaml.__with_libyaml__ and not yaml.reader.Reader.NON_PRINTABLE.search(text):
        try:
            depth = 0
            for event in yaml.parse(text, Loader=yaml.CSafeLoader):
                if isinstance(event, yaml.NodeEvent):
                    _check(event, depth)
                if isinstance(event, yaml.CollectionStartEvent):
                    depth += 1
                elif isinstance(event, yaml.CollectionEndEvent):
                    depth -= 1
            return yaml.compose(text, Loader=yaml.CSafeLoader)
        except yaml.YAMLError:
            pass
    return yaml.compose(text, Loader=_Loader)


def _refused(problem: str, event) -> yaml.composer.ComposerError:
    return yaml.composer.ComposerError(None, None, problem, event.start_mark)


def read_document(file: str | Path, environ: dict[str, str] | None = None,
                  offline: bool = False) -> Document:
    """`offline`: a variable that is not set is noted (Document.unset), not an error."""
    file = str(file)
    text = _read_text(file)
    try:
        node = _composed(text)
    except yaml.reader.ReaderError as exc:
        line = text[:exc.position].count("\n") + 1 if isinstance(exc.position, int) else None
        code = exc.character if isinstance(exc.character, int) else 0
        raise ConfigError(f"invalid YAML: the non-printable character U+{code:04X} is not allowed "
                          f"(only tabs and line breaks are)", file, line=line) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"invalid YAML: {problem}", file,
                          line=mark.line + 1 if mark else None) from None
    env = os.environ if environ is None else environ
    doc = Document(file, {}, {})
    reader = _Values(doc, env, _allowed(env.get(ALLOWED_VARIABLES, "")), offline,
                     text.count("\n") + 1)
    doc.values = reader.value(node, "") if node is not None else {}
    doc.interpolated = frozenset(reader.expanded)
    return doc


def _read_text(file: str) -> str:
    """The file as UTF-8 text, at most MAX_BYTES (a device or a huge file is refused, not read
    forever)."""
    try:
        with open(file, "rb") as stream:
            data = stream.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read the pipeline file: {exc.strerror}", file) from None
    if len(data) > MAX_BYTES:
        raise ConfigError(f"the pipeline file is larger than {MAX_BYTES // 2**20} MB", file)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"invalid YAML: byte 0x{data[exc.start]:02X} is not UTF-8 (save the "
                          f"file as UTF-8)", file, line=data[:exc.start].count(b"\n") + 1) \
            from None


def _allowed(setting: str) -> list[str] | None:
    """The variable patterns operators allow (None: any)."""
    patterns = [p.strip() for p in setting.split(",") if p.strip()]
    return patterns or None


@dataclass
class _Values:
    """YAML nodes to plain values, noting lines, interpolating where allowed."""

    doc: Document
    env: Any
    allowed: list[str] | None
    offline: bool
    last: int = 0  # the text's last line (libyaml marks an empty node ending the text past it)
    expanded: set[str] = field(default_factory=set)

    def line(self, node: yaml.Node) -> int:
        """The line (1-based) where `node` starts, at most the text's last."""
        return min(node.start_mark.line + 1, self.last or node.start_mark.line + 1)

    def value(self, node: yaml.Node, path: str) -> Any:
        doc = self.doc
        doc.lines[path] = self.line(node)
        if isinstance(node, yaml.MappingNode):
            result: dict[str, Any] = {}
            for key_node, value_node in node.value:
                line = self.line(key_node)
                if not isinstance(key_node, yaml.ScalarNode):
                    raise ConfigError("a key must be plain text, not a list or mapping",
                                      doc.file, path or None, line)
                key = str(key_node.value)
                child = f"{path}.{key}" if path else key
                if key in result:
                    raise ConfigError(f"duplicate key `{key}`", doc.file, child, line)
                doc.lines[child] = line
                result[key] = self.value(value_node, child)
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self.value(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
        value = self._scalar(node, path)
        if isinstance(value, str) and "${" in value:
            return self._interpolate(value, path, self.line(node))
        if not isinstance(value, str) and value is not None:
            doc.texts[path] = node.value  # what was written, should the key want text
        return value

    def _scalar(self, node: yaml.ScalarNode, path: str) -> Any:
        """YAML's own typing (5401 -> int, true -> bool); text YAML cannot type as it looks
        (2024-02-30, a timestamp that is no date) stays text, an explicit tag must fit."""
        try:
            return _SCALARS.construct_object(node)
        except Exception:  # noqa: BLE001 - PyYAML's constructors fail in many ways (`!!int ''`)
            if node.tag == _SCALARS.resolve(yaml.ScalarNode, node.value, (True, False)):
                return node.value
            raise ConfigError(f"`{node.value[:40]}` is not a valid !!{node.tag[len(_YAML):]}",
                              self.doc.file, path, self.line(node)) from None

    def _interpolate(self, text: str, path: str, line: int) -> str:
        doc = self.doc
        if path not in INTERPOLATED:
            raise ConfigError(
                f"`${{...}}` reads the job's environment, which only the keys that configure "
                f"connections and paths may do ({', '.join(INTERPOLATED)}); `{path}` may not "
                f"(the environment holds the job's secrets)", doc.file, path, line)
        if path == "source.password" and not re.fullmatch(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}", text):
            raise ConfigError("the password must come wholly from one variable "
                              "(password: ${MYSQL_PASSWORD}), with no default and nothing "
                              "around it, or from password_file", doc.file, path, line)
        doc.texts[path] = text
        self.expanded.add(path)
        unset = []

        def replace(match: re.Match) -> str:
            name, default = match.group("name"), match.group("default")
            if self.allowed is not None and not any(fnmatch.fnmatchcase(name, p)
                                                    for p in self.allowed):
                raise ConfigError(f"${{{name}}} is not among the variables this job lets "
                                  f"pipeline files read ({ALLOWED_VARIABLES}: "
                                  f"{', '.join(self.allowed)})", doc.file, path, line)
            if name in self.env:
                if path not in _CHECKED:
                    hide(self.env[name], f"${{{name}}}",
                         minimum=4 if path == "source.password" else MIN_HIDDEN)
                return self.env[name]
            if default is not None:
                return default
            unset.append(name)
            return match.group(0)

        value = _VAR.sub(replace, text)
        if unset and self.offline:
            doc.unset[path] = unset[0]
        elif unset:
            hint = "" if path == "source.password" else \
                f" (write ${{{unset[0]}:-default}} to give a default)"
            raise ConfigError(f"environment variable ${{{unset[0]}}} is not set{hint}",
                              doc.file, path, line)
        return value
