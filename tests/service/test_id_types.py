"""The id types of the request schemas (service/schemas/common.py): lengths counted in
characters, the NUL character refused (docs/personalizer.md, "Event ids"), and the
limits as the OpenAPI document states them."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from service.schemas.common import EVENT_ID_MAX_LENGTH, ArmId, EventId, StoredEventId

ID_TYPES = [(ArmId, 256), (EventId, EVENT_ID_MAX_LENGTH), (StoredEventId, EVENT_ID_MAX_LENGTH + 16)]


@pytest.mark.parametrize(("id_type", "longest"), ID_TYPES)
def test_lengths_count_characters_and_nul_is_refused(id_type: Any, longest: int) -> None:
    ids = TypeAdapter(id_type)
    assert ids.validate_python("ß" * longest) == "ß" * longest  # 2 bytes each in UTF-8
    assert ids.validate_python("a") == "a"
    for bad, error in [
        ("", "string_too_short"),
        ("ß" * (longest + 1), "string_too_long"),
        ("a\x00b", "value_error"),
        (7, "string_type"),
    ]:
        with pytest.raises(ValidationError) as caught:
            ids.validate_python(bad)
        assert [e["type"] for e in caught.value.errors()] == [error]
    assert ids.json_schema() == {"type": "string", "minLength": 1, "maxLength": longest}
