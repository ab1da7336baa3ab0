"""The production `Ids`: random identifiers (uuid4)."""

from __future__ import annotations

import uuid


class RandomIds:
    """Job ids are a uuid4's 32 hex characters; tokens are the first 12 of another's."""

    def job_id(self) -> str:
        return uuid.uuid4().hex

    def token(self) -> str:
        return uuid.uuid4().hex[:12]


#: The default of the services that draw ids (stateless, so one is enough).
RANDOM_IDS = RandomIds()
