"""The job use cases behind the API: create, read, edit, lifecycle, bulk actions, run retries, header secrets."""
