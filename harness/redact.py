"""Secret redaction, applied by the single writers of results and artifacts.

Covers the exact key(s) the controller knows, anything shaped like an Anthropic
key (``sk-ant-...``), and bearer/x-api-key header values. Redaction happens
before anything is persisted or printed; it is not a reason to let a secret
reach an agent in the first place (the key never enters the agent container).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "[REDACTED]"
_PATTERNS = (
    re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)(x-api-key[\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9_\-\.]{12,}"),
    re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?bearer\s+)[A-Za-z0-9_\-\.]{12,}"),
)


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # longest first so a secret that contains another is removed whole
        self._secrets = sorted({s for s in secrets if s and len(s) >= 8}, key=len, reverse=True)

    def add(self, secret: str) -> None:
        if secret and len(secret) >= 8 and secret not in self._secrets:
            self._secrets = sorted([*self._secrets, secret], key=len, reverse=True)

    def text(self, value: str) -> str:
        for secret in self._secrets:
            value = value.replace(secret, REDACTED)
        for pattern in _PATTERNS:
            value = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + REDACTED, value)
        return value

    def data(self, value: bytes) -> bytes:
        if not value:
            return value
        return self.text(value.decode("utf-8", errors="surrogateescape")).encode("utf-8", errors="surrogateescape")
