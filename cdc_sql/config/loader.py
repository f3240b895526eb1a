"""Read YAML into plain values, remembering the line of every key path, and expand ${VAR}.

`${VAR}` and `${VAR:-default}` expand only in the keys that configure connections and paths
(INTERPOLATED), which operators set per environment. Everywhere else (projections, sources,
table names, keys...) a pipeline file is edited by analysts, who must not reach the job's
environment (its secrets): `${` there is an error naming the key, before anything runs
(docs/security.md)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cdc_sql.errors import ConfigError

_SCALARS = yaml.SafeLoader("")
_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")
INTERPOLATED = ("source.host", "source.port", "source.user", "source.password",
                "source.password_file", "source.server_id", "source.ssl.ca", "source.ssl.cert",
                "source.ssl.key", "target.path", "target.catalog", "target.schema",
                "engine.mode", "engine.url")


@dataclass
class Document:
    """A parsed file: its values, and the line (1-based) where each key path starts."""

    file: str
    values: Any
    lines: dict[str, int]
    interpolated: frozenset[str] = frozenset()  # key paths whose value came through ${VAR}

    def error(self, message: str, path: str) -> ConfigError:
        return ConfigError(message, self.file, path, self.line_of(path))

    def line_of(self, path: str) -> int | None:
        while path:
            if path in self.lines:
                return self.lines[path]
            path = re.sub(r"(\.[^.\[]+|\[\d+\])$", "", path)
        return self.lines.get("")


def read_document(file: str | Path, environ: dict[str, str] | None = None) -> Document:
    file = str(file)
    try:
        text = Path(file).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read the pipeline file: {exc.strerror}", file) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"invalid YAML: {problem}", file,
                          line=mark.line + 1 if mark else None) from None
    lines: dict[str, int] = {}
    expanded: set[str] = set()
    env = os.environ if environ is None else environ
    values = _to_values(node, "", lines, expanded, env, file) if node is not None else {}
    return Document(file, values, lines, frozenset(expanded))


def _to_values(node: yaml.Node, path: str, lines: dict[str, int], expanded: set[str], env,
               file: str) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            child = f"{path}.{key}" if path else key
            if key in result:
                raise ConfigError(f"duplicate key `{key}`", file, child, key_node.start_mark.line + 1)
            lines[child] = key_node.start_mark.line + 1
            result[key] = _to_values(value_node, child, lines, expanded, env, file)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_to_values(item, f"{path}[{i}]", lines, expanded, env, file)
                for i, item in enumerate(node.value)]
    value = _SCALARS.construct_object(node)  # YAML's own typing: 5401 -> int, true -> bool
    if isinstance(value, str) and "${" in value:
        if path not in INTERPOLATED:
            raise ConfigError(
                f"`${{...}}` reads the job's environment, which only the keys that configure "
                f"connections and paths may do ({', '.join(INTERPOLATED)}); `{path}` may not "
                f"(the environment holds the job's secrets)", file, path, node.start_mark.line + 1)
        value = _interpolate(value, path, env, file, node.start_mark.line + 1)
        expanded.add(path)
    return value


def _interpolate(text: str, path: str, env, file: str, line: int) -> str:
    def replace(match: re.Match) -> str:
        name, default = match.group("name"), match.group("default")
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise ConfigError(f"environment variable ${{{name}}} is not set (write ${{{name}:-default}} "
                          f"to give a default)", file, path, line)

    return _VAR.sub(replace, text)
