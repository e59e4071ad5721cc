"""Bodies of the audit routes (``GET /audit``, ``GET /policies/{name}/history``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class AuditEntry(BaseModel):
    """One change to a policy, its model or its log (docs/operations.md, "Audit trail")."""

    id: str = Field(description="the record's id")
    created_at: float = Field(description="when the change was made (unix seconds)")
    policy: str
    action: str = Field(
        description="create, update, delete, reset, retire_arms, model_import, "
        "snapshot_restore, rebuild, log_delete, retention or drift (a drift detection)"
    )
    actor: str = Field(
        description="who: key:<first 12 hex digits of the API key's SHA-256>, loopback, "
        "policies-file, cli or system"
    )
    request_id: str | None = Field(description="the X-Request-ID of the request that made it")
    before: dict[str, Any] | None = Field(description="the changed settings before")
    after: dict[str, Any] | None = Field(description="the changed settings after")
    detail: dict[str, Any] | None = Field(
        description="what else the action did (rows deleted, a rebuild's counts, ...)"
    )


class AuditHistory(BaseModel):
    """A page of audit records, oldest first."""

    records: list[AuditEntry]
    next: str | None = Field(description="pass as ?after= for the next page; null on the last page")
