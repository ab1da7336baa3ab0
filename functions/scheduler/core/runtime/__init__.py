"""The plain implementations of the core's runtime ports: random ids, metrics that count nothing, tasks in turn."""
