"""cdc_sql's import graph, read from the source (imports inside functions included): no loops,
and no import against the layering docs/architecture.md writes down (its "Layers" block)."""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "cdc_sql"
RULE = re.compile(r"^(\S+)\s+knows nothing of\s+(.+)$")


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path) -> dict[str, Path]:
    return {module_name(p, root): p for p in root.rglob("*.py")}


def imports(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, wherever the import stands."""
    known = modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        found = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([*package.split(".")[:len(package.split(".")) -
                                                         node.level + 1], *filter(None, [base])])
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                           for alias in node.names]
            else:
                continue
            found |= {t for t in targets if t in known and t != name}
        graph[name] = found
    return graph


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def layering(doc: Path) -> list[tuple[str, list[str]]]:
    """The rules of the architecture's "Layers" block: `<place> knows nothing of <places>`,
    a place being a package directory (`lake/`), a module (`cli.py`)."""
    text = doc.read_text()
    block = re.search(r"## Layers\n.*?```\n(.*?)```", text, re.S)
    assert block, f"{doc}: no ``` block under '## Layers'"
    rules = [RULE.match(line.strip()) for line in block.group(1).splitlines() if line.strip()]
    assert all(rules), "every line of the Layers block is `<place> knows nothing of <places>`"
    return [(m.group(1), [p.strip() for p in m.group(2).split(",")]) for m in rules]


def place(name: str, spec: str) -> bool:
    """Whether module `name` (cdc_sql.lake.bronze) is in the place `spec` (lake/, cli.py)."""
    dotted = "cdc_sql." + spec.rstrip("/").removesuffix(".py").replace("/", ".")
    return name == dotted or name.startswith(dotted + ".")


def violations(graph: dict[str, set[str]], rules: list[tuple[str, list[str]]]) -> list[str]:
    return sorted(f"{name} imports {target} ({lower} knows nothing of {upper})"
                  for lower, uppers in rules for upper in uppers
                  for name, targets in graph.items() if place(name, lower)
                  for target in targets if place(target, upper))


def test_cdc_sql_has_no_import_loop():
    assert loops(imports(PACKAGE)) == []


def test_cdc_sql_imports_follow_the_layers_in_the_architecture():
    rules = layering(ROOT / "docs" / "architecture.md")
    assert rules
    assert violations(imports(PACKAGE), rules) == []


def test_a_planted_loop_and_a_planted_layer_breach_are_found(tmp_path):
    """The checks above on a copy of the package with one lazy import planted."""
    import shutil

    copy = tmp_path / "cdc_sql"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    assert loops(imports(copy)) == []
    offsets = copy / "source" / "offsets.py"
    offsets.write_text(offsets.read_text() + "\n\ndef _planted():\n"
                       "    from cdc_sql.lake import state  # noqa: F401\n")
    found = loops(imports(copy))
    assert any({"cdc_sql.source.offsets", "cdc_sql.lake.state"} <= set(part)
               for part in found), found
    assert "cdc_sql.source.offsets imports cdc_sql.lake.state (source/ knows nothing of lake/)" \
        in violations(imports(copy), layering(ROOT / "docs" / "architecture.md"))


@pytest.mark.parametrize("spec, name, inside", [("lake/", "cdc_sql.lake.silver.plan", True),
                                                ("lake/", "cdc_sql.lakes", False),
                                                ("cli.py", "cdc_sql.cli", True)])
def test_a_place_is_a_package_or_a_module(spec, name, inside):
    assert place(name, spec) is inside
