"""Secrets never leave the process: every message, record or log line that can carry a URL
or an API key passes through :func:`redact`.

Configured keys are registered (:func:`remember_secret`, :func:`remember_url_secrets`) and
replaced wherever they appear; anything shaped like a key (``sk-...``, ``Bearer ...``), URL
userinfo, key-bearing query parameters and key-like path segments are removed too.
"""

from __future__ import annotations

import re
import urllib.parse

__all__ = ["redact", "redact_url", "remember_secret", "remember_url_secrets", "key_like_segment"]

_KEY_PATTERN = re.compile(r"\b(sk-[A-Za-z0-9_\-*]{4,}|Bearer\s+\S+)")
# Credentials inside URLs: the userinfo of "scheme://user:secret@host" and query parameters
# that carry a key or token ("?api-key=...", "&access_token=...", Azure's "sig=").
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@?#]+@")
_URL_SECRET_PARAM = re.compile(
    r"(?i)([?&](?:api[-_]?key|key|token|access[-_]?token|auth|authorization|password|secret|sig|"
    r"signature|code)=)[^&#\s]+")


_SECRETS: set[str] = set()
# A URL in free text, and the path segments of one that look like a key rather than a name:
# a known key prefix, or a long token mixing letters and digits (gateways that take the key in
# the path: "https://gw.example/sk-abc.../v1", "https://host/3f9c0a...e1/v1").
_URL_IN_TEXT = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s'\"<>]+")
_KEY_PREFIX = re.compile(r"^(sk|pk|rk|key|gsk|xai|hf|api|tok|token)[-_]", re.IGNORECASE)
_TOKEN_SEGMENT = re.compile(r"^[A-Za-z0-9_\-.~%]{20,}$")
_UUID_OR_HEX = re.compile(r"^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{24,})$",
                          re.IGNORECASE)


def key_like_segment(segment: str) -> bool:
    """A URL path segment that looks like a key rather than a name."""
    if len(segment) >= 12 and _KEY_PREFIX.match(segment):
        return True
    if _UUID_OR_HEX.match(segment):  # gateways that take a UUID or hex token as the key
        return True
    if not _TOKEN_SEGMENT.match(segment):
        return False
    # A name is made of short words ("gpt-4o-mini-2024-07-18"); a key has one long random run.
    longest = max(re.split(r"[-_.~]", segment), key=len)
    digits = sum(c.isdigit() for c in longest)
    letters = sum(c.isalpha() for c in longest)
    return len(longest) >= 16 and digits >= 3 and letters >= 3


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
    segments = ["***" if key_like_segment(seg) else seg for seg in path.split("/")]
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
    text = _URL_IN_TEXT.sub(_redact_url_path, text)
    return _KEY_PATTERN.sub("***", text)


def redact_url(url: str | None) -> str:
    """``url`` fit to print: no ``user:password@``, no key-bearing query parameter, no
    key-like path segment."""
    return redact(str(url or ""))


def remember_url_secrets(url: str | None) -> None:
    """Register the credentials inside ``url`` so they are redacted wherever they appear."""
    if not url:
        return
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return
    for secret in (parts.password, parts.username if parts.password is None else None):
        if secret and len(secret) >= 4:
            _SECRETS.add(secret)
            _SECRETS.add(urllib.parse.unquote(secret))
    for name, value in urllib.parse.parse_qsl(parts.query):
        if value and len(value) >= 4 and _URL_SECRET_PARAM.search(f"?{name}=x"):
            _SECRETS.add(value)
    # A key in the path is also a secret wherever it shows up alone (an SDK message quoting
    # only the path, a percent-decoded copy).
    for segment in parts.path.split("/"):
        if key_like_segment(segment):
            _SECRETS.add(segment)
            _SECRETS.add(urllib.parse.unquote(segment))




def remember_secret(secret: str | None) -> None:
    """Register a configured key so it is redacted wherever it appears."""
    if secret:
        _SECRETS.add(secret)
