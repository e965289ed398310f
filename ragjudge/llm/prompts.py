"""Prompt templates as versioned files: one loader, strict front-matter, safe rendering.

A template is a Markdown file: a JSON object between two ``---`` lines (the front-matter),
then the messages. Each message starts with a line ``<!-- role: system -->`` (or ``user``,
``assistant``); ``{{name}}`` inserts a variable. Front-matter keys:

* ``id`` (str), ``version`` (str) -- required; recorded with every answer with the file's sha256;
* ``variables`` -- the names the caller must supply (required; unknown/missing ones are errors);
* ``output_schema`` -- JSON Schema of the reply (required); sent as a strict ``json_schema``
  response format and enforced locally by :meth:`Prompt.validate`;
* ``labels`` -- optional ``{"0": "description", ...}`` label scale, the only place a prompt
  states its scale: ``{{labels}}`` renders it (one line per label) and ``{{label_choices}}``
  the bare values ("0, 1, 2 or 3"); the template must render it and must not spell the
  values out itself;
* ``label_field`` -- the reply field holding the label (for logprobs -> probability per label);
  its schema (or its items' schema, for a list of labels) must have an ``enum`` of exactly
  the labels, of the labels' type -- checked when the prompt is parsed;
* ``max_tokens``, ``expected_output_tokens`` -- reply budget and the dry-run estimate.

JSON rather than YAML front-matter: it needs no dependency, has one reading (no implicit
typing: ``no`` stays a string, ``3`` is a number), and the output schema is JSON anyway.

Variables are substituted in a single pass, so text inside a value (a passage containing
``{{query}}`` or ``</passage>``) is never interpreted; any tag of the template that
delimits data (``<passage>``...) is escaped inside values -- in every spelling a model might
read as the tag (``</passage >``, ``</ passage>``, ``< /PASSAGE>``, ``<passage id=1>``) -- so a
passage cannot close its own delimiter and pose as instructions.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import InputError

__all__ = ["Prompt", "load_prompt", "parse_prompt", "list_prompts", "localized_name", "check_language"]

_VAR = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_ROLE = re.compile(r"^<!--\s*role:\s*(system|user|assistant)\s*-->\s*$", re.MULTILINE)
_TAG = re.compile(r"</?([A-Za-z][A-Za-z0-9_-]*)>")
# A tag-like run in a *value*: "<", optional "/" and whitespace anywhere before the name,
# then anything up to the end of the name. Matches what a reader would take for the tag.
_VALUE_TAG = re.compile(r"<\s*/?\s*([A-Za-z][A-Za-z0-9_-]*)")
_RESERVED = {"labels", "label_choices"}
# Schema keywords a strict structured-output provider may refuse (Azure/OpenAI strict mode
# rejects length and pattern constraints; llama.cpp and vLLM grammars enforce them).
_BASIC_DROP = frozenset({"maxLength", "minLength", "pattern", "format"})


@dataclass(frozen=True)
class Prompt:
    """A loaded template. Immutable; ``sha256`` identifies the exact file content."""

    id: str
    version: str
    sha256: str
    messages: tuple[tuple[str, str], ...]  # (role, template text)
    variables: tuple[str, ...]
    output_schema: dict[str, Any]
    labels: dict[str, str] | None = None
    label_field: str | None = None
    max_tokens: int = 512
    expected_output_tokens: int = 100
    description: str = ""
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """``id.vVERSION`` -- how reports name the prompt."""
        return f"{self.id}.v{self.version}"

    @property
    def label_values(self) -> list[Any]:
        """Valid labels as they appear in a reply (ints when the labels are integers)."""
        if not self.labels:
            return []
        return [_label_value(k) for k in self.labels]

    def render_labels(self) -> str:
        if not self.labels:
            return ""
        return "\n".join(f"{k} = {v}" for k, v in self.labels.items())

    def render_label_choices(self) -> str:
        """The label values as prose: ``"0, 1, 2 or 3"``."""
        return _choices(list(self.labels or ()))

    def render(self, **variables: Any) -> list[dict[str, str]]:
        """Chat messages with the variables inserted (single pass; data tags escaped)."""
        missing = [v for v in self.variables if v not in variables]
        extra = [v for v in variables if v not in self.variables]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"missing variable(s) {', '.join(missing)}")
            if extra:
                parts.append(f"unknown variable(s) {', '.join(extra)}")
            raise InputError(f"prompt {self.name}: " + "; ".join(parts), source=self.source)
        tags = self._data_tags()
        values = {k: _escape_tags(str(v), tags) for k, v in variables.items()}
        values["labels"] = self.render_labels()
        values["label_choices"] = self.render_label_choices()
        return [
            {"role": role, "content": _VAR.sub(lambda m: values[m.group(1)], text)}
            for role, text in self.messages
        ]

    def _data_tags(self) -> frozenset[str]:
        found: set[str] = set()
        for _, text in self.messages:
            found.update(m.group(1).lower() for m in _TAG.finditer(text))
        return frozenset(found)

    def response_format(self, kind: str, *, basic: bool = False) -> dict[str, Any] | None:
        """The ``response_format`` request field for ``"json_schema"``, ``"json_object"`` or
        ``"text"``. ``basic=True``: the schema without length/pattern keywords, for servers
        whose strict mode refuses them."""
        if kind == "json_schema":
            return {
                "type": "json_schema",
                "json_schema": {
                    "name": re.sub(r"[^A-Za-z0-9_-]", "_", self.id)[:64] or "reply",
                    "schema": _basic(self.output_schema) if basic else self.output_schema,
                    "strict": True,
                },
            }
        if kind == "json_object":
            return {"type": "json_object"}
        return None

    def validate(self, obj: Any) -> Any:
        """Check a parsed reply against ``output_schema``; raise ``ValueError`` naming the problem."""
        _check(obj, self.output_schema, "reply")
        return obj

    def provenance(self) -> dict[str, str]:
        return {"prompt_id": self.id, "prompt_version": self.version, "prompt_sha": self.sha256}


def _label_value(key: str) -> Any:
    try:
        return int(key)
    except ValueError:
        return key


def _escape_tags(text: str, tags: frozenset[str]) -> str:
    if not tags or "<" not in text:
        return text

    def esc(m: re.Match[str]) -> str:
        return "&lt;" + m.group(0)[1:] if m.group(1).lower() in tags else m.group(0)

    return _VALUE_TAG.sub(esc, text)


def _choices(values: list[str]) -> str:
    if len(values) <= 1:
        return "".join(values)
    return ", ".join(values[:-1]) + " or " + values[-1]


def _basic(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _basic(v) for k, v in schema.items() if k not in _BASIC_DROP}
    if isinstance(schema, list):
        return [_basic(v) for v in schema]
    return schema


def _check_scale(labels: dict[str, Any], label_field: Any, schema: Mapping[str, Any],
                 messages: list[tuple[str, str]], source: str) -> None:
    """The label scale is stated once (front-matter ``labels``): the schema's enum of the
    label field must be exactly those labels, and the template renders them rather than
    spelling them out."""
    props = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
    field_schema = props.get(label_field) if isinstance(label_field, str) else None
    if not isinstance(field_schema, Mapping):
        raise InputError(f"label_field {label_field!r} is not a property of output_schema",
                         source=source, field="label_field")
    if field_schema.get("type") == "array" and isinstance(field_schema.get("items"), Mapping):
        field_schema = field_schema["items"]
    enum = field_schema.get("enum")
    keys = [str(k) for k in labels]
    integer = all(re.fullmatch(r"-?\d+", k) for k in keys)
    want = [int(k) for k in keys] if integer else keys
    if not isinstance(enum, list) or len(enum) != len(want) \
            or not all(any(_same(e, w) for e in enum) for w in want):
        raise InputError(f"output_schema enum of {label_field!r} is {enum!r} but the labels are "
                         f"{want!r}: state the scale once, in 'labels', and make the enum match",
                         source=source, field="output_schema")
    if field_schema.get("type") not in (("integer", "number") if integer else ("string",)):
        raise InputError(f"{label_field!r} has type {field_schema.get('type')!r} but the labels "
                         f"are {'integers' if integer else 'strings'}", source=source,
                         field="output_schema")
    text = "".join(t for _, t in messages)
    if not re.search(r"\{\{\s*labels\s*\}\}", text):
        raise InputError("a prompt with labels must render them with {{labels}}", source=source,
                         field="labels")
    spelled = _choices(keys)
    if len(keys) > 1 and spelled in text:
        raise InputError(f"the template spells the label values out ({spelled!r}); write "
                         "{{label_choices}} so the scale lives only in the front-matter",
                         source=source, field="labels")


# ------------------------------------------------------------------------ schema subset
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def _check(value: Any, schema: Mapping[str, Any], where: str) -> None:
    """Validate the JSON Schema subset structured outputs use (type, enum, properties,
    required, additionalProperties, items, minimum/maximum, min/maxLength, min/maxItems)."""
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        ok = False
        for n in names:
            py = _TYPES.get(n)
            if py is None:
                raise ValueError(f"{where}: unsupported schema type {n!r}")
            if isinstance(value, bool) and n in ("integer", "number"):
                continue  # JSON true is not a number
            if isinstance(value, py):
                ok = True
                break
        if not ok:
            raise ValueError(f"{where}: expected {' or '.join(names)}, got {_json_type(value)}")
    if "enum" in schema and not any(_same(value, e) for e in schema["enum"]):
        raise ValueError(f"{where}: {value!r} is not one of {schema['enum']!r}")
    if "const" in schema and not _same(value, schema["const"]):
        raise ValueError(f"{where}: must be {schema['const']!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise ValueError(f"{where}: {value} is below the minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise ValueError(f"{where}: {value} is above the maximum {schema['maximum']}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            raise ValueError(f"{where}: shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise ValueError(f"{where}: longer than {schema['maxLength']} characters")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                raise ValueError(f"{where}: missing field {name!r}")
        if schema.get("additionalProperties") is False:
            extra = [k for k in value if k not in props]
            if extra:
                raise ValueError(f"{where}: unexpected field(s) {', '.join(map(repr, extra))}")
        for name, sub in props.items():
            if name in value:
                _check(value[name], sub, f"{where}.{name}")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            raise ValueError(f"{where}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise ValueError(f"{where}: more than {schema['maxItems']} items")
        if "items" in schema:
            for i, item in enumerate(value):
                _check(item, schema["items"], f"{where}[{i}]")


def _same(a: Any, b: Any) -> bool:
    # 1 == True in Python; JSON keeps them apart.
    return type(a) is type(b) and a == b or (
        isinstance(a, (int, float)) and isinstance(b, (int, float))
        and not isinstance(a, bool) and not isinstance(b, bool) and a == b
    )


def _json_type(v: Any) -> str:
    for name, py in _TYPES.items():
        if isinstance(v, bool):
            return "boolean"
        if isinstance(v, py):
            return name
    return type(v).__name__


# ------------------------------------------------------------------------ loading
def parse_prompt(text: str, *, source: str = "<prompt>") -> Prompt:
    """Parse a template's text (see the module docstring for the format)."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise InputError("a prompt template must start with a '---' line", source=source, line=1)
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        raise InputError("front-matter is not closed by a '---' line", source=source)
    try:
        meta = json.loads("".join(lines[1:end]))
    except json.JSONDecodeError as exc:
        raise InputError(f"front-matter is not valid JSON: {exc.msg}", source=source,
                         line=exc.lineno + 1) from None
    if not isinstance(meta, dict):
        raise InputError("front-matter must be a JSON object", source=source, line=2)
    for key in ("id", "version", "variables", "output_schema"):
        if key not in meta:
            raise InputError(f"front-matter lacks {key!r}", source=source, field=key)
    if not isinstance(meta["output_schema"], dict):
        raise InputError("must be a JSON object", source=source, field="output_schema")
    variables = meta["variables"]
    if not isinstance(variables, list) or not all(isinstance(v, str) for v in variables):
        raise InputError("must be a list of names", source=source, field="variables")
    labels = meta.get("labels")
    if labels is not None and (not isinstance(labels, dict) or not labels):
        raise InputError("must be an object {label: description}", source=source, field="labels")
    label_field = meta.get("label_field")
    if labels and label_field is None:
        raise InputError("labels need a label_field naming the reply field", source=source,
                         field="label_field")
    if label_field is not None and not labels:
        raise InputError("label_field needs a 'labels' scale", source=source, field="labels")

    body = "".join(lines[end + 1:])
    marks = list(_ROLE.finditer(body))
    if not marks:
        raise InputError("no '<!-- role: system|user -->' message marker", source=source)
    if body[: marks[0].start()].strip():
        raise InputError("text before the first role marker", source=source)
    messages: list[tuple[str, str]] = []
    for i, m in enumerate(marks):
        stop = marks[i + 1].start() if i + 1 < len(marks) else len(body)
        content = body[m.end():stop].strip("\n")
        messages.append((m.group(1), content.rstrip() + ("\n" if content.endswith("\n") else "")))
    used = {m.group(1) for _, t in messages for m in _VAR.finditer(t)}
    unknown = used - set(variables) - _RESERVED
    if unknown:
        raise InputError(f"template uses undeclared variable(s) {', '.join(sorted(unknown))}",
                         source=source, field="variables")
    unused = set(variables) - used
    if unused:
        raise InputError(f"declared variable(s) never used: {', '.join(sorted(unused))}",
                         source=source, field="variables")
    if labels:
        _check_scale(labels, label_field, meta["output_schema"], messages, source)
    return Prompt(
        id=str(meta["id"]),
        version=str(meta["version"]),
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        messages=tuple(messages),
        variables=tuple(variables),
        output_schema=meta["output_schema"],
        labels={str(k): str(v) for k, v in labels.items()} if labels else None,
        label_field=label_field,
        max_tokens=int(meta.get("max_tokens", 512)),
        expected_output_tokens=int(meta.get("expected_output_tokens", 100)),
        description=str(meta.get("description", "")),
        source=source,
        meta=meta,
    )


def _shipped() -> Any:
    """The shipped templates: the ``ragjudge.prompts`` package when installed (the wheel maps the
    top-level ``prompts/`` directory to it), else ``prompts/`` beside the source tree."""
    try:
        return resources.files("ragjudge.prompts")
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "prompts"


def list_prompts() -> list[str]:
    """Names of the templates shipped with ragjudge (``relevance.v1``...)."""
    root = _shipped()
    try:
        return sorted(p.name[:-3] for p in root.iterdir() if p.name.endswith(".md"))
    except OSError:
        return []


_LANGUAGE = re.compile(r"^[a-z]{2,3}$")


def check_language(language: str | None) -> str:
    """A declared language as a lowercase ISO 639-1/3 code (``"en"`` when none is given)."""
    code = (language or "en").strip().lower()
    if not _LANGUAGE.match(code):
        raise InputError(f"expected a language code such as en, es or fr, got {language!r}",
                         field="language")
    return code


def localized_name(name: str, language: str | None) -> str:
    """The shipped variant of prompt ``name`` for ``language``: ``context_recall.v2`` in Spanish
    is ``context_recall.es.v2`` (an ordinary prompt file, with its own id and sha256) where it
    is shipped; English, paths and prompts without a variant keep ``name`` (the English prompts
    ask the model to answer in the data's language, so they still work, only less well tuned)."""
    code = check_language(language)
    if code == "en" or "/" in name or "\\" in name or name.endswith(".md"):
        return name
    stem, dot, version = name.rpartition(".")
    if not dot or not version.startswith("v"):
        return name
    variant = f"{stem}.{code}.{version}"
    return variant if variant in _shipped_names() else name


@functools.lru_cache(maxsize=1)
def _shipped_names() -> frozenset[str]:
    return frozenset(list_prompts())  # shipped files do not change while we run


def load_prompt(name_or_path: str | Path | Prompt, *, language: str | None = None) -> Prompt:
    """Load a shipped template by name (``"relevance.v1"``) or a user's template file by path;
    with ``language``, the shipped variant for that language where there is one
    (:func:`localized_name`)."""
    if isinstance(name_or_path, Prompt):
        return name_or_path
    text_name = str(name_or_path)
    if language is not None and not isinstance(name_or_path, Path):
        text_name = localized_name(text_name, language)
    path = Path(text_name).expanduser()
    looks_like_path = isinstance(name_or_path, Path) or "/" in text_name or "\\" in text_name \
        or text_name.endswith(".md")
    if looks_like_path or path.exists():
        try:
            data = path.read_text(encoding="utf-8")
        except OSError as exc:
            if not looks_like_path:
                data = None
            else:
                raise InputError(f"cannot read prompt template: {exc.strerror}",
                                 source=str(path)) from None
        if data is not None:
            return parse_prompt(data, source=str(path))
    cached = _SHIPPED_CACHE.get(text_name)
    if cached is not None:
        return cached
    try:
        resource = _shipped().joinpath(f"{text_name}.md")
        data = resource.read_text(encoding="utf-8")
    except (FileNotFoundError, OSError, ModuleNotFoundError):
        shipped = ", ".join(list_prompts()) or "none"
        raise InputError(f"unknown prompt {text_name!r} (shipped: {shipped}; or give a file path)",
                         field="prompt") from None
    prompt = parse_prompt(data, source=f"ragjudge.prompts/{text_name}.md")
    _SHIPPED_CACHE[text_name] = prompt  # shipped files do not change while we run
    return prompt


_SHIPPED_CACHE: dict[str, Prompt] = {}
