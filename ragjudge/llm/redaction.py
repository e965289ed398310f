"""Secrets never leave the process: every message, record or log line that can carry a URL
or an API key passes through :func:`redact`.

Configured keys are registered (:func:`remember_secret`, :func:`remember_url_secrets`) and
replaced wherever they appear; anything shaped like a key (``sk-...``, ``Bearer ...``), URL
userinfo, key-bearing query parameters and key-like path segments are removed too.
"""

from __future__ import annotations

import logging
import re
import urllib.parse

__all__ = ["redact", "redact_url", "remember_secret", "remember_url_secrets", "key_like_segment",
           "redact_logs"]

_KEY_PATTERN = re.compile(r"\b(sk-[A-Za-z0-9_\-*]{4,}|AIza[0-9A-Za-z_\-]{30,}|(?:Bearer|Basic)\s+\S+)")
# Credentials inside URLs: the userinfo of "scheme://user:secret@host" and query parameters
# that carry a key or token ("?api-key=...", "&access_token=...", Azure's "sig="). The userinfo
# runs to the last "@" before the path, as URL parsers read it: a password with a bare "@"
# ("user:p@ss@host") is redacted whole.
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s?#]*@")
# A parameter (query, fragment or ";matrix") whose name says it carries a credential:
# "api-key", "subscription-key", "api_token", "access_token", "client_secret", "password",
# "X-Amz-Signature", Azure's "sig", Azure Functions' "code". Not "api-version".
_SECRET_NAME = (r"[a-z0-9_.\-]*(?:key|token|secret|pass(?:w(?:or)?d|phrase)?|pwd|auth|credential|signature"
                r"|session)[a-z0-9_.\-]*|sig|code|pw|jwt")
_URL_SECRET_PARAM = re.compile(rf"(?i)([?&#](?:{_SECRET_NAME})=)[^&#;,\s'\"<>]+")
_URL_MATRIX_PARAM = re.compile(rf"(?i)(;(?:{_SECRET_NAME})=)[^/;?&#,\s'\"<>]+")


_SECRETS: set[str] = set()
# Path segments of the configured URLs that are not shaped like names ("/KEY/", "/Ab3x/"):
# redacted wherever they are a whole segment of a URL, however short.
_PATH_SECRETS: set[str] = set()
_NAME_LIKE = re.compile(r"[a-z][a-z0-9]*(?:[-_.][a-z0-9]+)*")
# A URL in free text, and the path segments of one that look like a key rather than a name:
# a known key prefix, or a long token mixing letters and digits (gateways that take the key in
# the path: "https://gw.example/sk-abc.../v1", "https://host/3f9c0a...e1/v1").
_URL_IN_TEXT = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s'\"<>]+")
_KEY_PREFIX = re.compile(r"^(sk|pk|rk|key|gsk|xai|hf|api|tok|token)[-_]", re.IGNORECASE)
_TOKEN_SEGMENT = re.compile(r"^[A-Za-z0-9_\-.~%]{20,}$")
_UUID_OR_HEX = re.compile(r"^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{16,})$",
                          re.IGNORECASE)


def _random_word(word: str) -> bool:
    """A run of letters and digits shaped like a generated token, not a word or a version:
    upper and lower case and digits mixed ("aB3xY9"), or letters and digits mixed at length
    ("a8k2p9q3"); "v1", "gpt", "4o", "2024", "Instruct", "Qwen2" stay names."""
    digits = sum(c.isdigit() for c in word)
    letters = sum(c.isalpha() for c in word)
    if len(word) >= 6 and digits and any(c.isupper() for c in word) and any(c.islower() for c in word):
        return True
    return len(word) >= 8 and digits >= 2 and letters >= 2


def key_like_segment(segment: str) -> bool:
    """A URL path segment that looks like a key rather than a name."""
    if "=" in segment:  # a ";key=value" matrix parameter or a "key=value" segment
        return bool(re.fullmatch(rf"(?i)(?:{_SECRET_NAME})=.*", segment.partition(";")[2] or segment))
    if len(segment) >= 8 and _KEY_PREFIX.match(segment):
        return True
    if _UUID_OR_HEX.match(segment):  # gateways that take a UUID or hex token as the key
        return True
    if not _TOKEN_SEGMENT.match(segment) and not re.fullmatch(r"[A-Za-z0-9_\-.~%]{6,}", segment):
        return False
    # A name is made of short words ("gpt-4o-mini-2024-07-18"); a key has a random run.
    words = [w for w in re.split(r"[-_.~%]", segment) if w]
    if any(_random_word(w) for w in words):
        return True
    longest = max(words, key=len, default="")
    digits = sum(c.isdigit() for c in longest)
    letters = sum(c.isalpha() for c in longest)
    return len(longest) >= 16 and digits >= 3 and letters >= 3


def _secret_segment(segment: str) -> bool:
    return (segment in _PATH_SECRETS or urllib.parse.unquote(segment) in _PATH_SECRETS
            or key_like_segment(segment))


def _redact_segment(segment: str) -> str:
    head, semi, params = segment.partition(";")
    if semi:  # "v1;key=abc": the parameters were redacted by name already
        return ("***" if _secret_segment(head) else head) + semi + params
    return "***" if _secret_segment(segment) else segment


def _redact_url_path(match: re.Match[str]) -> str:
    url = match.group(0)
    head, sep, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    if not slash:
        return url
    tail = ""
    for mark in ("?", "#"):
        if mark in path:
            path, cut, after = path.partition(mark)
            tail = cut + after + tail
            break
    segments = [_redact_segment(seg) for seg in path.split("/")]
    return f"{head}{sep}{host}/{'/'.join(segments)}{tail}"


def redact(text: str) -> str:
    """Remove API keys (the configured ones, anything shaped like one, and credentials inside
    URLs: userinfo, key-bearing query parameters and key-like path segments) from ``text``.
    Every message, record or log line that can carry a URL or a key passes through here."""
    for secret in _SECRETS:
        # Placeholder keys of local servers ("k", "no-key") protect nothing, and replacing
        # every "k" would garble the message itself.
        if len(secret) >= 8:
            text = text.replace(secret, "***")
    text = _URL_USERINFO.sub(r"\1***@", text)
    text = _URL_SECRET_PARAM.sub(r"\1***", text)
    text = _URL_MATRIX_PARAM.sub(r"\1***", text)
    text = _URL_IN_TEXT.sub(_redact_url_path, text)
    for segment in _PATH_SECRETS:  # a configured URL's key quoted as a bare path ("/KEY/v1/chat")
        if segment in text:
            text = re.sub(rf"(?<=/){re.escape(segment)}(?=[/?#;\s'\",)]|$)", "***", text)
    return _KEY_PATTERN.sub("***", text)


def redact_url(url: str | None) -> str:
    """``url`` fit to print: no ``user:password@``, no key-bearing query parameter, no
    key-like path segment."""
    return redact(str(url or ""))


#: Loggers that can print a request's URL (httpx's "HTTP Request: POST <url>" at INFO, the
#: SDKs' request options at DEBUG) or an error quoting one. A logger's filter sees only its own
#: records, so the modules that log are named one by one.
_URL_LOGGERS = ("httpx", "httpcore.connection", "httpcore.http11", "httpcore.http2", "httpx2",
                "httpcore2.connection", "httpcore2.http11", "httpcore2.http2",
                "openai._base_client", "openai", "anthropic._base_client", "anthropic",
                "ragjudge.llm", "ragjudge.server", "uvicorn.error")


class _RedactingFilter(logging.Filter):
    """Passes every record, its message redacted (arguments folded in first)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not fit its format: leave it to logging
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_FILTER = _RedactingFilter()


def redact_logs() -> None:
    """Redact the records of the loggers that can carry a URL or a key (idempotent)."""
    for name in _URL_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


def remember_url_secrets(url: str | None) -> None:
    """Register the credentials inside ``url`` so they are redacted wherever they appear
    (messages, records and the log lines of the HTTP stack)."""
    if not url:
        return
    redact_logs()
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return
    for secret in (parts.password, parts.username if parts.password is None else None):
        if secret and len(secret) >= 4:
            _SECRETS.add(secret)
            _SECRETS.add(urllib.parse.unquote(secret))
            # A bare "@" in a password: parsers that split at the first "@" (libpq) quote the
            # part after it as the host ("failed to resolve host 'rest@db'").
            _SECRETS.update(piece for piece in secret.split("@")[1:] if len(piece) >= 4)
    for name, value in [*urllib.parse.parse_qsl(parts.query), *urllib.parse.parse_qsl(parts.fragment)]:
        if value and len(value) >= 4 and _URL_SECRET_PARAM.search(f"?{name}=x"):
            _SECRETS.add(value)
            _SECRETS.add(urllib.parse.quote(value, safe=""))
    # A key in the path is also a secret wherever it shows up alone (an SDK message quoting
    # only the path, a percent-decoded copy).
    for segment in parts.path.split("/"):
        segment = segment.partition(";")[0]
        if key_like_segment(segment):
            _SECRETS.add(segment)
            _SECRETS.add(urllib.parse.unquote(segment))
        if segment and not _NAME_LIKE.fullmatch(urllib.parse.unquote(segment)):
            _PATH_SECRETS.add(segment)
            _PATH_SECRETS.add(urllib.parse.unquote(segment))




def remember_secret(secret: str | None) -> None:
    """Register a configured key so it is redacted wherever it appears."""
    if secret:
        _SECRETS.add(secret)
        redact_logs()
