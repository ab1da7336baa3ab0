"""Per-tenant limits: dispatch budgets (fairness), execution slots (concurrency) and API request limits."""
