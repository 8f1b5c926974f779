"""MkDocs hook: the config reference in configs.md, generated from the config dataclasses
(their fields, types, defaults and the docstring under each field), so it cannot drift."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import typing
from typing import Any, Dict, List

MARKER = "<!-- config-reference -->"


def _field_docs(cls: type) -> Dict[str, str]:
    """The string literal under each field of a dataclass, by field name."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for node, after in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):  # fmt: skip
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _type_name(kind: Any) -> str:
    text = kind.__name__ if isinstance(kind, type) else str(kind)
    return text.replace("typing.", "").replace("NoneType", "None")


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return repr(f.default)
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
        return "(section)" if dataclasses.is_dataclass(value) else repr(value)
    return "(required)"


def reference_rows(cls: type, prefix: str = "") -> List[List[str]]:
    """[key, type, default, meaning] for every setting of ``cls``, nested sections flattened."""
    hints = typing.get_type_hints(cls)
    docs = _field_docs(cls)
    rows = []
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(kind):
            rows += reference_rows(kind, key + ".")
            continue
        rows.append([key, _type_name(kind), _default(f), docs.get(f.name, "")])
    return rows


def reference() -> str:
    from wenet_lite.config import ExperimentConfig

    lines = []
    hints = typing.get_type_hints(ExperimentConfig)
    for f in dataclasses.fields(ExperimentConfig):
        section = hints[f.name]
        if not dataclasses.is_dataclass(section):
            continue
        lines += [f"### `{f.name}`", "", " ".join((section.__doc__ or "").split()), ""]
        lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for key, kind, default, doc in reference_rows(section, f.name + "."):
            cells = [f"`{key}`", f"`{kind}`", f"`{default}`", doc.replace("|", "\\|")]
            lines.append("| " + " | ".join(c.replace("\n", " ") for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, reference())
    return markdown


RESULTS_FOLDERS = ("recipes/synthetic/results", "recipes/synthetic/results_long")
"""recipe outputs the pages show (pictures) and link (RESULTS.md): served from the checkout"""


def on_files(files: Any, config: Any, **kwargs: Any) -> Any:
    from pathlib import Path

    from mkdocs.structure.files import File

    root = Path(config["config_file_path"]).parent
    for folder in RESULTS_FOLDERS:
        for path in sorted((root / folder).glob("*")):
            if path.suffix in (".png", ".md", ".svg"):
                files.append(File(str(path.relative_to(root)), str(root), config["site_dir"],
                                  config["use_directory_urls"]))  # fmt: skip
    return files
