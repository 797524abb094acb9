"""The embedded model's tool calls, held to a grammar so that each is well formed.

Given ``tools`` as chat completions' field, llama.cpp renders them through Qwen's jinja template
and parses ``<tool_call>`` back; but Qwen2.5-Coder-1.5B often writes the JSON bare, in a code
fence, or with its arguments misnamed, and llama.cpp passes that on as words (``tool_text``).
llama.cpp refuses a ``grammar`` beside ``tools``, so while a session has tools the request
carries neither ``tools`` nor ``tool_choice``: the tools are written into the system message in
Qwen2.5's own format (what its template writes, ``system``), and a GBNF ``grammar`` (llama.cpp's
sampling parameter, which xllamacpp's server takes on chat completions) allows exactly two
answers: words that cannot begin a call, or one call (in ``<tool_call>`` tags, or bare) naming
a declared function with a JSON object of its declared arguments. ``tool_text`` reads that call back.

``tool_choice`` is kept by the grammar: ``required`` allows only a call, a named function only
that one's, ``none`` no tools at all (``applies`` is false).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

#: Qwen2.5's tool prompt, word for word as its chat template writes it after the system message.
TOOLS_OPEN = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_CLOSE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)

#: JSON values, as llama.cpp's own json.gbnf; blanks are at most one space, so a model that
#: would pad cannot loop on whitespace until its token cap.
_JSON = r"""
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( string ":" ws value ( "," ws string ":" ws value )* )? "}"
array ::= "[" ws ( value ( "," ws value )* )? "]"
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" hex hex hex hex ) )* "\""
hex ::= [0-9a-fA-F]
number ::= "-"? ( [0-9] | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws ::= " "?
"""
#: An answer in words: its first character is none that could begin a call (``tool_text``'s
#: openings) nor a blank before one, so words are never held back as a possible call.
_WORDS = r"""words ::= [^<{`" \t\r\n] [^\x00]*"""


def applies(tools: Sequence[Any], tool_choice: Any) -> bool:
    """Whether a request with these tools is held to the grammar (any, unless ``none``)."""
    return bool(_functions(tools)) and tool_choice != "none"


def system(chat: list[dict[str, Any]], tools: Sequence[Any]) -> list[dict[str, Any]]:
    """``chat`` with Qwen2.5's tool prompt after its system message (one made if it has none)."""
    listed = "".join("\n" + json.dumps(tool, ensure_ascii=False) for tool in tools)
    block = TOOLS_OPEN + listed + TOOLS_CLOSE
    if chat and chat[0]["role"] == "system":
        return [{**chat[0], "content": f"{chat[0]['content']}{block}"}, *chat[1:]]
    return [{"role": "system", "content": block.lstrip()}, *chat]


def grammar(tools: Sequence[Any], tool_choice: Any = "auto") -> str:
    """The GBNF of an answer to a request with ``tools`` under ``tool_choice``."""
    functions = _functions(tools)
    named = _named(tool_choice)
    if named is not None:
        functions = {name: schema for name, schema in functions.items() if name == named}
    rules = [f"root ::= {'call' if tool_choice == 'required' or named else 'words | call'}"]
    calls = [f"call{index}" for index in range(len(functions))]
    # In its tags as the template asks, or bare: Qwen2.5-Coder-1.5B starts a call with "{" more
    # often than with "<tool_call>" (measured), and a grammar that forbade that start turned the
    # call into words ("I called the get_weather function").
    rules.append('call ::= "<tool_call>\\n" body "\\n</tool_call>" | body')
    rules.append(f'body ::= "{{\\"name\\": " ( {" | ".join(calls)} ) "}}"')
    for rule, (name, schema) in zip(calls, functions.items(), strict=True):
        rules.append(f'{rule} ::= {_literal(json.dumps(name))} ", \\"arguments\\": " {rule}args')
        rules.append(f"{rule}args ::= {_arguments(rule, schema)}")
    return "\n".join([*rules, _WORDS, _JSON.strip()])


def _arguments(rule: str, schema: Any) -> str:
    """An object whose keys are the declared properties' names (any, where none are declared)."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return "object"
    if not properties:
        return '"{}"'
    keys = " | ".join(_literal(json.dumps(key)) for key in properties)
    pair = f'( {keys} ) ":" ws value'
    return f'"{{" ( {pair} ( "," ws {pair} )* )? "}}"'


def _functions(tools: Sequence[Any]) -> dict[str, Any]:
    """The chat-shaped function tools by name, with their parameters' schema."""
    found: dict[str, Any] = {}
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            found[function["name"]] = function.get("parameters")
    return found


def _named(tool_choice: Any) -> str | None:
    """The one function ``tool_choice`` names, in chat's shape or the Realtime API's."""
    if not isinstance(tool_choice, dict):
        return None
    function = tool_choice.get("function")
    name = function.get("name") if isinstance(function, dict) else tool_choice.get("name")
    return name if isinstance(name, str) else None


def _literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
