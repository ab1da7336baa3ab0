"""What a job may call: the allowed AWS targets per tenant, their canonical ARNs, the registered handler targets."""
