"""punctual's command line.

`punctual_cli.main` is the `punctual` command. It talks to the API with the SDK's client
(`punctual_sdk.client.Client`; `punctual_cli.client.SchedulerClient` adds the core's checks of a definition
before it is sent).
"""
