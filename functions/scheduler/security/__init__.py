"""Who calls and how calls are trusted: tenants of IAM principals, webhook signatures, the functions' secrets."""
