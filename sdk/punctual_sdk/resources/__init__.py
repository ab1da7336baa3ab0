"""The API's resources, one client class each; `punctual_sdk.client.Client` is all of them."""
