"""The read side: the read model behind the API, history and list pages, positions for read-your-writes,
list cursors bound to their caller, and the one JSON rule for documents leaving the API.

Imports only app.api.deps and app.api.problems from the rest of app.api.
"""
