"""Render tool definitions the way OpenAI shows them to the model, so they can be counted.

OpenAI does not bill the JSON you send in ``tools``: it rewrites each function
into a TypeScript-like declaration inside the system prompt and bills that::

    namespace functions {

    // Get the current weather
    type get_weather = (_: {
    // City and state, e.g. San Francisco, CA
    location: string,
    unit?: "celsius" | "fahrenheit",
    }) => any;

    } // namespace functions

The format is not documented; it was reverse-engineered by several projects
(openai-java's ``FunctionFormat``, hmarr's openai-chat-tokens, pamelafox's
openai-messages-token-helper) and checked against the API's ``prompt_tokens``:
counting this text plus a fixed preamble (`ChatFormat.tools_preamble`, 9
tokens) matches the API within a few tokens. Where the format is unknown (``$ref``,
``anyOf`` of objects, exotic keywords) we render the raw JSON schema instead,
which costs more tokens than any compact rendering: the estimate errs high.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from ..exceptions import UsageError
from ..messages import JSONValue

__all__ = ["render_tools"]

_SIMPLE = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null"}


def render_tools(tools: Sequence[Mapping[str, JSONValue]]) -> str:
    """Render OpenAI (``{"type": "function", "function": {...}}``), bare or Anthropic (``input_schema``) tool definitions.

    Raises:
        UsageError: ``tools`` is not a list of mappings, or a tool has no ``name``.
    """
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
        raise UsageError(f"tools must be a list of tool definitions (dicts), got {type(tools).__name__}")
    lines = ["namespace functions {", ""]
    for i, tool in enumerate(tools):
        fn = _function_of(tool, i)
        name = fn.get("name")
        description = fn.get("description")
        if isinstance(description, str) and description:
            lines.append(f"// {description}")
        params = fn.get("parameters", fn.get("input_schema"))
        properties = params.get("properties") if isinstance(params, Mapping) else None
        if isinstance(params, Mapping) and isinstance(properties, Mapping) and properties:
            lines.append(f"type {name} = (_: {{")
            lines.extend(_object_lines(params, 0))
            lines.append("}) => any;")
        elif params is None or (isinstance(params, Mapping) and isinstance(properties, Mapping)):
            lines.append(f"type {name} = () => any;")
        else:
            lines.append(f"type {name} = (_: {_json(params)}) => any;")
        lines.append("")
    lines.append("} // namespace functions")
    return "\n".join(lines)


def _function_of(tool: object, index: int) -> Mapping[str, JSONValue]:
    if not isinstance(tool, Mapping):
        raise UsageError(f"tools[{index}] must be a dict, got {type(tool).__name__}")
    fn = tool.get("function")
    if isinstance(fn, Mapping):
        tool = fn
    if not isinstance(tool.get("name"), str):
        raise UsageError(
            f"tools[{index}] has no 'name': expected {{'type': 'function', 'function': {{'name': ..., "
            "'parameters': {...}}}} (OpenAI) or {'name': ..., 'input_schema': {...}} (Anthropic)"
        )
    return tool


def _object_lines(schema: Mapping[str, JSONValue], indent: int) -> list[str]:
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return []
    required = schema.get("required")
    required_names = set(required) if isinstance(required, list) else set()
    pad = " " * indent
    lines: list[str] = []
    for key, prop in properties.items():
        if isinstance(prop, Mapping):
            description = prop.get("description")
            if isinstance(description, str) and description:
                lines.extend(f"{pad}// {d}" for d in description.splitlines() or [""])
        optional = "" if key in required_names else "?"
        rendered = _type(prop, indent).split("\n")
        lines.append(f"{pad}{key}{optional}: {rendered[0]}" + ("," if len(rendered) == 1 else ""))
        if len(rendered) > 1:
            lines.extend(rendered[1:-1])
            lines.append(rendered[-1] + ",")
    return lines


def _type(schema: JSONValue, indent: int) -> str:
    if not isinstance(schema, Mapping):
        return _json(schema)
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return " | ".join(_json(v) for v in enum)
    if "const" in schema:
        return _json(schema["const"])
    for key, sep in (("anyOf", " | "), ("oneOf", " | "), ("allOf", " & ")):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return sep.join(_type(o, indent) for o in options)
    kind = schema.get("type")
    if isinstance(kind, list) and kind:
        return " | ".join(_type({**schema, "type": k}, indent) for k in kind)
    if isinstance(kind, str) and kind in _SIMPLE:
        return _SIMPLE[kind]
    if kind == "array":
        items = schema.get("items")
        return f"{_type(items, indent) if items is not None else 'any'}[]"
    if kind == "object" or "properties" in schema:
        body = _object_lines(schema, indent + 2)
        if not body:
            return "object"
        return "{\n" + "\n".join(body) + "\n" + " " * indent + "}"
    rest = {k: v for k, v in schema.items() if k not in ("description", "title")}
    # Unknown constructs ($ref, patternProperties...): the raw JSON over-counts, which is the safe side.
    return _json(rest) if rest else "any"


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)
