"""The domain core: schedules, occurrence keys, the dispatch and execution protocols. No AWS imports."""
