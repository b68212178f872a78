"""A tool's JSON schema, derived from its Python source as Letta derives it.

The function's name, its docstring's summary as the description, one property
per parameter typed from its annotation and described by the Google-style
`Args:` section, and `required` = the parameters without defaults.

The source is parsed with `ast` and never executed here: user code runs only in
the sandbox. So annotations are read as written (`str`, `list[int]`,
`Optional[str]`, `str | None`, `Literal["a", "b"]`, ...), not evaluated.
"""

from __future__ import annotations

import ast
from typing import Any

import docstring_parser

# Parameters the runtime fills in, never the model (as in Letta).
_HIDDEN_PARAMS = frozenset({"self", "agent_state"})
_SCALARS = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}


class ToolSourceError(ValueError):
    """Source that cannot become a tool; the message tells the author what to fix."""


def derive_schema(source_code: str, name: str | None = None) -> dict[str, Any]:
    fn = _function(source_code, name)
    doc = docstring_parser.parse(ast.get_docstring(fn) or "")
    description = "\n\n".join(p for p in (doc.short_description, doc.long_description) if p)
    if not description:
        raise ToolSourceError(f"function '{fn.name}' needs a docstring describing what it does")
    arg_docs = {p.arg_name: p.description for p in doc.params if p.description}
    args = fn.args
    if args.vararg or args.kwarg:
        raise ToolSourceError(f"function '{fn.name}': *args and **kwargs cannot be described")
    positional = args.posonlyargs + args.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(
        args.defaults
    )
    params = list(zip(positional, defaults, strict=True)) + list(
        zip(args.kwonlyargs, args.kw_defaults, strict=True)
    )
    properties: dict[str, Any] = {}
    required: list[str] = []
    for arg, default in params:
        if arg.arg in _HIDDEN_PARAMS:
            continue
        if arg.annotation is None:
            raise ToolSourceError(
                f"function '{fn.name}': parameter '{arg.arg}' has no type annotation"
            )
        prop = _json_type(arg.annotation, fn.name, arg.arg)
        if arg.arg not in arg_docs:
            raise ToolSourceError(
                f"function '{fn.name}': parameter '{arg.arg}' is not described in the "
                "docstring's Args: section"
            )
        prop["description"] = arg_docs[arg.arg]
        properties[arg.arg] = prop
        if default is None:
            required.append(arg.arg)
    return {
        "name": fn.name,
        "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }


def _function(source_code: str, name: str | None) -> ast.FunctionDef | ast.AsyncFunctionDef:
    try:
        tree = ast.parse(source_code)
    except SyntaxError as exc:
        raise ToolSourceError(f"source_code does not parse: {exc.msg} (line {exc.lineno})") from exc
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    if not functions:
        raise ToolSourceError("source_code defines no top-level function")
    if name is not None:
        named = [f for f in functions if f.name == name]
        if not named:
            raise ToolSourceError(f"source_code defines no function named '{name}'")
        return named[-1]
    # Helpers usually come first and the tool last, as in Letta's examples.
    return functions[-1]


def _json_type(node: ast.expr, fn: str, param: str) -> dict[str, Any]:
    def fail() -> ToolSourceError:
        return ToolSourceError(
            f"function '{fn}': the type of parameter '{param}' ({ast.unparse(node)}) "
            "cannot be expressed as a JSON schema"
        )

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        # A string annotation: `x: "list[int]"`.
        try:
            return _json_type(ast.parse(node.value, mode="eval").body, fn, param)
        except SyntaxError:
            raise fail() from None
    if isinstance(node, ast.Constant) and node.value is None:
        return {"type": "null"}
    if isinstance(node, ast.Name | ast.Attribute):
        base = _dotted_tail(node)
        if base in _SCALARS:
            return {"type": _SCALARS[base]}
        if base in ("list", "List"):
            return {"type": "array", "items": {"type": "string"}}
        if base in ("dict", "Dict"):
            return {"type": "object"}
        raise fail()
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _optional([node.left, node.right], fn, param, fail)
    if isinstance(node, ast.Subscript):
        base = _dotted_tail(node.value)
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if base in ("list", "List", "Sequence") and len(items) == 1:
            return {"type": "array", "items": _json_type(items[0], fn, param)}
        if base in ("dict", "Dict"):
            return {"type": "object"}
        if base == "Optional" and len(items) == 1:
            return _json_type(items[0], fn, param)
        if base == "Union":
            return _optional(items, fn, param, fail)
        if base == "Literal":
            values = [i.value for i in items if isinstance(i, ast.Constant)]
            if len(values) != len(items) or not values:
                raise fail()
            kinds = {type(v) for v in values}
            json_kind = {str: "string", int: "integer", float: "number", bool: "boolean"}
            if len(kinds) != 1 or next(iter(kinds)) not in json_kind:
                raise fail()
            return {"type": json_kind[next(iter(kinds))], "enum": values}
    raise fail()


def _optional(members: list[ast.expr], fn: str, param: str, fail: Any) -> dict[str, Any]:
    # `T | None` and `Union[T, None]` are T (whether it is required depends on
    # a default); a union of two real types has no single JSON type.
    real = [m for m in members if not (isinstance(m, ast.Constant) and m.value is None)]
    if len(real) != 1:
        raise fail()
    return _json_type(real[0], fn, param)


def _dotted_tail(node: ast.expr) -> str:
    # `typing.List` and `List` alike.
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""
