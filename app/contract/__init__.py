"""What downstream consumers rely on, built from the schema catalog: registry subjects, registry setup, AsyncAPI.

May import ``app``'s top (settings, errors), ``schemas`` and ``commands``; the API and the validator import it.
"""
