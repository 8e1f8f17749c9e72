"""Profile validation errors as one-line messages: `train.batch_size = -4: must be >= 1`.

Turns pydantic's errors into text a user can act on: the dotted field, the value as TOML would write
it and the rule it broke; an unknown key gets the closest valid key (`did you mean
'train.batch_size'?`); several problems are joined under a line naming the profile. `profile_loader`
attributes each message to the layer that caused it. Torch-free, like the rest of the contract wing.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from trainer_core.contract.profile import Profile


def section_models() -> dict[str, type[BaseModel]]:
    """Section name -> its pydantic model, in schema order."""
    models: dict[str, type[BaseModel]] = {}
    for name, field in Profile.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            models[name] = field.annotation
    return models


def join_problems(problems: list[str], title: str) -> str:
    """One problem as one line; several under a first line that names the
    profile and counts them."""
    if len(problems) == 1:
        return problems[0]
    body = "\n".join(f"  {problem}" for problem in problems)
    return f"invalid profile {title} ({len(problems)} problems):\n{body}"


_TYPE_RULES = {
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "string_type": "expected a string",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "list_type": "expected a list",
    "tuple_type": "expected a list",
    "dict_type": "expected a table",
    "model_type": "expected a table",
    "model_attributes_type": "expected a table",
    "path_type": "expected a path (a string)",
}

_BOUND_RULES = {
    "greater_than_equal": ">=",
    "greater_than": ">",
    "less_than_equal": "<=",
    "less_than": "<",
}


def describe_error(err: ErrorDetails) -> str:
    """One pydantic error as 'train.batch_size = -4: must be >= 1' (no source prefix)."""
    loc, kind = tuple(err["loc"]), err["type"]
    if kind == "extra_forbidden":
        return _unknown_key_message(loc, err.get("input"))
    if kind == "value_error" and len(loc) == 1:
        return f"[{loc[0]}] {_strip_value_error(err['msg'])}"
    if kind == "value_error" and not loc:  # a rule across sections: its message names the fields
        return _strip_value_error(err["msg"])
    if kind == "missing" and loc and isinstance(loc[-1], int):
        return (
            f"{_dotted(loc[:-1])} = {show_value(err.get('input'))}: too few items (item {loc[-1]}"
            " is missing)"
        )
    return f"{_dotted(loc)} = {show_value(err.get('input'))}: {_rule(err)}"


def _rule(err: ErrorDetails) -> str:
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind in _TYPE_RULES:
        return _TYPE_RULES[kind]
    if kind in _BOUND_RULES:
        bound = next(iter(ctx.values()))
        return f"must be {_BOUND_RULES[kind]} {_show_number(bound)}"
    if kind == "literal_error":
        return f"must be one of {ctx['expected']}"
    if kind == "string_too_short" and ctx.get("min_length") == 1:
        return "must not be empty"
    if kind == "value_error":
        return _strip_value_error(err["msg"])
    return err["msg"][0].lower() + err["msg"][1:] if err["msg"] else kind


def _strip_value_error(msg: str) -> str:
    return msg.removeprefix("Value error, ")


def _unknown_key_message(loc: tuple[Any, ...], value: Any) -> str:
    """'unknown key 'train.bath_size' (did you mean 'train.batch_size'?)' and the like."""
    models = section_models()
    if len(loc) == 1:
        return _unknown_top_level_message(str(loc[0]), isinstance(value, dict), models)
    section, key = str(loc[0]), str(loc[1])
    valid = list(models[section].model_fields) if section in models else []
    close = difflib.get_close_matches(key, valid, n=1)
    if close:
        return f"unknown key '{section}.{key}' (did you mean '{section}.{close[0]}'?)"
    elsewhere = [name for name, model in models.items() if key in model.model_fields]
    if elsewhere:
        return f"unknown key '{section}.{key}' (did you mean '{elsewhere[0]}.{key}'?)"
    return f"unknown key '{section}.{key}' (valid keys in [{section}]: {', '.join(valid)})"


def _unknown_top_level_message(
    name: str, is_table: bool, models: dict[str, type[BaseModel]]
) -> str:
    sections = list(models)
    close = difflib.get_close_matches(name, sections, n=1)
    if is_table or close:
        hint = f"did you mean '{close[0]}'?" if close else f"valid sections: {', '.join(sections)}"
        return f"unknown section '{name}' ({hint})"
    owners = [section for section, model in models.items() if name in model.model_fields]
    if owners:
        return f"unknown top-level key '{name}' (did you mean '{owners[0]}.{name}'?)"
    return f"unknown top-level key '{name}' (keys go in a section: {', '.join(sections)})"


def _dotted(loc: tuple[Any, ...]) -> str:
    """('train', 'betas', 0) -> 'train.betas[0]'."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _show_number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def show_value(value: Any) -> str:
    """A value as it would be written in TOML, for messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, Path)):
        return json.dumps(str(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key} = {show_value(item)}" for key, item in value.items()) + "}"
    return repr(value)
