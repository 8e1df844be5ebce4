"""MkDocs hook (mkdocs.yml `hooks:`): pages generated from the code when the site is built.

A page that holds one of these markers gets it replaced:

- `<!-- sluice:config-reference -->`: every section and key of `sluice.yaml`, from the pydantic models in
  `sluice/config/` (the models are imported; type, default and constraints come from their fields, the
  description from `Field(description=...)` or else from the comments next to the field in the source, the
  section text from the model's docstring).
- `<!-- sluice:cli-help ARGS -->`: the output of `python -m data_assets.cli ARGS --help`.
- `<!-- sluice:job-config MODULE CLASS -->`: the run-config fields of a Dagster `Config` class, read from
  `data_assets/MODULE.py` with `ast` (no Dagster import).
- `<!-- sluice:schema MODULE NAME [drop=COLUMN,...] -->`: the columns of a dataset's Arrow schema, the
  `pyarrow.Schema` constant (or the function called with literal arguments, `NAME(14)`) of a sluice module,
  with the comment written next to each column in the source; `drop=` leaves out columns the stored files
  do not have.

Nothing here is copied from the models by hand: a renamed key, a changed default or a new section shows up
on the next `make docs`.
"""

from __future__ import annotations

import ast
import inspect
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import tokenize
import types
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MARKER = re.compile(r"<!-- sluice:(?P<kind>[a-z-]+)(?P<args>[^>]*?)\s*-->")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if "<!-- sluice:" not in markdown:
        return markdown

    def replace(match: re.Match[str]) -> str:
        kind, args = match["kind"], match["args"].split()
        if kind == "config-reference":
            return config_reference()
        if kind == "cli-help":
            return cli_help(args)
        if kind == "job-config":
            return job_config(*args)
        if kind == "schema":
            return arrow_schema(*args)
        raise ValueError(f"{page.file.src_path}: unknown generated block {match[0]!r}")

    return MARKER.sub(replace, markdown)


# ---------------------------------------------------------------------------------------------------------
# The configuration reference


def config_reference() -> str:
    from pydantic import BaseModel

    from sluice.config import FORMAT_OPTIONS, LANGUAGE_KEYS, SluiceConfig

    out: list[str] = []

    def section_of(path: str, annotation: Any) -> tuple[str, str, type[BaseModel]] | None:
        """The subsection a field's value is documented in (a model, a list or map of models)."""
        model = _model_in(annotation)
        if model is None:
            return None
        origin = typing.get_origin(_strip_optional(annotation))
        title = f"{path}[]" if origin in (tuple, list) else f"{path}.<name>" if origin is dict else path
        return title, _anchor(path), model

    def render(title: str, anchor: str, model: type[BaseModel], level: int, path: str) -> None:
        heading = "Top level" if not title else f"`{title}`"
        out.extend(["", f"{'#' * level} {heading} {{#{anchor}}}", "", f"_Model: `{model.__module__}.{model.__qualname__}`_"])
        doc = inspect.cleandoc(model.__dict__.get("__doc__") or "")
        if doc:
            out.extend(["", _escape(doc)])
        if model.__name__ == "SourceSettings":
            links = ", ".join(f"[`{fmt}`](#sources-options-{fmt})" for fmt in FORMAT_OPTIONS)
            out.extend(["", f"`options` holds the keys of the source's format: {links}."])
        if model.__name__ == "CleaningSettings":
            keys = ", ".join(f"`{key}`" for key in LANGUAGE_KEYS)
            out.extend(["", f"Keys that `cleaning.languages.<code>` may set (`LANGUAGE_KEYS`): {keys}."])
        comments = _field_comments(model)
        children: list[tuple[str, str, type[BaseModel]]] = []
        rows = ["| key | type | default | description |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            sub = section_of(f"{path}.{name}" if path else name, field.annotation)
            description = field.description or comments.get(name, "")
            if sub is not None:
                children.append(sub)
                default = ("**required**; " if field.is_required() else "") + f"see [`{sub[0]}`](#{sub[1]})"
                description = description or _first_sentence(inspect.cleandoc(sub[2].__dict__.get("__doc__") or ""))
            else:
                default = _default(field)
            rows.append(f"| `{name}` | {_cell(_type(field.annotation, field.metadata))} | {default} | {_cell(description, prose=True)} |")
        out.extend(["", *rows])
        if model.__name__ == "SourceSettings":
            for fmt, options in FORMAT_OPTIONS.items():
                render(f"sources[].options ({fmt})", f"sources-options-{fmt}", options, level + 1, "sources[].options")
        for sub_title, sub_anchor, sub_model in children:
            render(sub_title, sub_anchor, sub_model, level + 1 if title else level, sub_title.removesuffix(".<name>"))

    render("", "top-level", SluiceConfig, 2, "")
    return "\n".join(out).strip() + "\n"


def _strip_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _model_in(annotation: Any) -> Any:
    from pydantic import BaseModel

    annotation = _strip_optional(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (tuple, list) and args:
        inner = args[0]
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            return inner
    if origin is dict and len(args) == 2 and isinstance(args[1], type) and issubclass(args[1], BaseModel):
        return args[1]
    return None


def _first_sentence(text: str) -> str:
    match = re.match(r"(.+?\.)(\s+[A-Z`]|$)", " ".join(text.split()))
    return match[1] if match else " ".join(text.split())


def _anchor(path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")


def _type(annotation: Any, metadata: list[Any] = ()) -> str:
    text = _type_name(annotation)
    bounds = []
    for item in metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(item, attr, None)
            if value is not None:
                bounds.append(f"{sign} {_number(value)}")
    return f"`{text}`" + (f", {', '.join(bounds)}" if bounds else "")


def _type_name(annotation: Any) -> str:
    if annotation is type(None) or annotation is None:
        return "null"
    if annotation is Any:
        return "any"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(json.dumps(arg) for arg in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(arg) for arg in args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"list[{_type_name(args[0])}]"
        return "[" + ", ".join(_type_name(arg) for arg in args) + "]"
    if origin is list:
        return f"list[{_type_name(args[0])}]"
    if origin is dict:
        return f"map[{_type_name(args[0])}, {_type_name(args[1])}]"
    if isinstance(annotation, type):
        from pydantic import BaseModel

        if issubclass(annotation, BaseModel):
            return "mapping"
        return {"str": "string", "int": "int", "float": "float", "bool": "bool"}.get(annotation.__name__, annotation.__name__)
    return str(annotation)


def _number(value: Any, powers: bool = False) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if powers and value >= 1 << 16 and value & (value - 1) == 0:
            return f"{value} (2^{value.bit_length() - 1})"
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _default(field: Any) -> str:
    from pydantic_core import PydanticUndefined

    if field.is_required():
        return "**required**"
    value = field.default_factory() if field.default_factory is not None else field.default
    if value is PydanticUndefined:
        return "**required**"
    return f"`{_yaml(value)}`"


def _yaml(value: Any) -> str:
    """A default as it would be written in sluice.yaml (flow style)."""
    if value is None:
        return "null"
    if isinstance(value, bool | int | float):
        return _number(value, powers=True)
    if isinstance(value, str):
        return json.dumps(value) if value == "" or re.search(r"[:#{}\[\],&*!|>'\"%@`]|^\s|\s$", value) else value
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_yaml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_yaml(key)}: {_yaml(item)}" for key, item in value.items()) + "}"
    return str(value)


def _field_comments(model: type) -> dict[str, str]:
    """Each field's comments in the model's source: the comment lines right above it, then its trailing comment."""
    try:
        source = textwrap.dedent(inspect.getsource(model))
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}  # line number -> comment text
    code_lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            code_lines.add(token.start[0])
    tree = ast.parse(source)
    found: dict[str, str] = {}
    for node in tree.body[0].body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        line = node.lineno - 1
        while line >= 1 and line in comments and line not in code_lines:
            above.insert(0, comments[line])
            line -= 1
        trailing = [comments[n] for n in range(node.lineno, (node.end_lineno or node.lineno) + 1) if n in comments]
        text = " ".join(part for part in [*above, *trailing] if part)
        if text:
            found[node.target.id] = text
    return found


def _escape(text: str) -> str:
    """Markdown-safe prose: `<`, `>` and `&` outside code spans as entities (so `<storage.root>` shows)."""
    parts = text.split("`")
    for index in range(0, len(parts), 2):
        parts[index] = parts[index].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def _cell(text: str, prose: bool = False) -> str:
    """One table cell: prose escaped (`_escape`), `|` escaped outside code spans (the table extension leaves
    pipes inside backticks alone, and would show a backslash there), on one line."""
    text = _escape(text) if prose else text
    parts = text.replace("\n", " ").split("`")
    for index in range(0, len(parts), 2):
        parts[index] = parts[index].replace("|", "\\|")
    return "`".join(parts)


# ---------------------------------------------------------------------------------------------------------
# The command line and the jobs' run config


def cli_help(args: list[str]) -> str:
    command = [sys.executable, "-m", "data_assets.cli", *args, "--help"]
    env = {**os.environ, "COLUMNS": "110", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command[2:])} failed ({result.returncode}): {result.stderr.strip()}")
    shown = " ".join(["sluice", *args, "--help"])
    return f"```text\n$ {shown}\n{result.stdout.rstrip()}\n```\n"


def job_config(module: str, class_name: str) -> str:
    path = ROOT / "data_assets" / f"{module}.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    if node is None:
        raise ValueError(f"{path}: no class {class_name}")
    rows = ["| key | type | default | description |", "|---|---|---|---|"]
    for item in node.body:
        if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
            continue
        annotation = ast.unparse(item.annotation)
        default, description = "**required**", ""
        call = item.value
        if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "Field":
            if call.args:
                default = f"`{_yaml(ast.literal_eval(call.args[0]))}`"
            for keyword in call.keywords:
                if keyword.arg == "description":
                    description = ast.literal_eval(keyword.value)
                elif keyword.arg == "default_factory":
                    default = "`[]`" if ast.unparse(keyword.value) == "list" else f"`{ast.unparse(keyword.value)}()`"
                elif keyword.arg == "default":
                    default = f"`{_yaml(ast.literal_eval(keyword.value))}`"
        elif item.value is not None:
            default = f"`{_yaml(ast.literal_eval(item.value))}`"
        rows.append(f"| `{item.target.id}` | `{annotation}` | {default} | {_cell(description, prose=True)} |")
    return "\n".join(rows) + "\n"


# ---------------------------------------------------------------------------------------------------------
# Dataset schemas


def arrow_schema(module_name: str, name: str, *options: str) -> str:
    import importlib

    module = importlib.import_module(module_name)
    call = re.fullmatch(r"(\w+)\((.*)\)", name)
    if call:
        arguments = ast.literal_eval(f"({call[2]},)") if call[2].strip() else ()
        schema = getattr(module, call[1])(*arguments)
        attr = call[1]
    else:
        schema, attr = getattr(module, name), name
    dropped = {column for option in options if option.startswith("drop=") for column in option[5:].split(",")}
    comments = _schema_comments(inspect.getsource(module), attr)
    rows = ["| column | Arrow type | nullable | note |", "|---|---|---|---|"]
    for field in schema:
        if field.name in dropped:
            continue
        kind = str(field.type).splitlines()[0]
        rows.append(f"| `{field.name}` | `{kind}` | {'yes' if field.nullable else 'no'} | {_cell(comments.get(field.name, ''), prose=True)} |")
    origin = f"_Schema: `{module_name}.{name}`_"
    return f"{origin}\n\n" + "\n".join(rows) + "\n"


def _schema_comments(source: str, attr: str) -> dict[str, str]:
    """Trailing comments of the lines naming a column inside the definition of `attr` (assignment or function)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    for node in tree.body:
        targets = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        if attr in targets or getattr(node, "name", None) == attr:
            found: dict[str, str] = {}
            for line in lines[node.lineno - 1 : node.end_lineno]:
                code, hash_, comment = line.partition("  # ")
                column = re.search(r"[\"'](\w+)[\"']", code)
                if hash_ and column:
                    found.setdefault(column[1], comment.strip())
            return found
    return {}
