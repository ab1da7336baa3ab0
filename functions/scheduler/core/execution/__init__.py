"""The steps of the execution protocol (docs/design.md §3.4), each in its own module; `scheduler.core.execute`'s
`Executor` runs them in order."""
