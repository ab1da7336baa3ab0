"""What a job is: its definition and states, schedules and cron, occurrence keys and shards, instants, labels."""
