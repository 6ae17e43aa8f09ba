"""Who the caller is: tokens and the issuers trusted to sign them (OIDC providers and their JWKS,
Arbiter's own local issuer), the secret policy, and the change feed's short-lived tickets.

Imports only app.api.problems from the rest of app.api.
"""
