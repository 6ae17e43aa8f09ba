"""The bounds of everything a rules document puts into records: names, messages and pointers (UTF-8 bytes).

``app.limits`` sizes the Avro records from these, so a rule's name, message and pointers always fit a rejection.
"""

from __future__ import annotations

#: The longest type name, tracked field name and rule name; the API refuses a longer ``object_type``.
MAX_NAME_BYTES = 64
#: The longest message of a rule.
MAX_MESSAGE_BYTES = 1024
#: The most JSON pointers a rejection names; more are dropped (the first ones are kept).
MAX_POINTERS = 16
#: The longest JSON pointer a rejection names; a longer one is cut at a token boundary.
MAX_POINTER_BYTES = 256
#: The most warnings an event carries (rules in warn or audit mode that would have refused its command): the first
#: ones, in the order the rules ran; later ones are not recorded.
MAX_WARNINGS = 4
#: The longest mode (``enforce``, ``warn``, ``audit``) and reason code a warning names.
MAX_MODE_BYTES = 16
MAX_REASON_BYTES = 32
#: The default bound on an object's tracked fields (the UTF-8 size of their canonical JSON); over it is TOO_LARGE.
DEFAULT_MAX_TRACKED_BYTES = 4096


def _is_name(text: str) -> bool:
    return text.isascii() and text[:1].isalpha() and all(c.isalnum() or c in "_-." for c in text)


def type_name_problem(name: str) -> str | None:
    """Return why ``name`` cannot be a type name (ASCII letter, then letters, digits, ``_-.``; at most
    ``MAX_NAME_BYTES``), or None."""
    if not name or len(name) > MAX_NAME_BYTES or not _is_name(name):
        return (f"object_type must be an ASCII letter followed by letters, digits, '_', '-' or '.', at most "
                f"{MAX_NAME_BYTES} characters")
    return None

#: What a name (type, tracked field, rule) looks like: see ``type_name_problem``.
NAME_PATTERN = "^[A-Za-z][A-Za-z0-9_.-]*$"
#: The longest qualified rule name in a rejection: ``<type>:<rule>``.
MAX_RULE_BYTES = 2 * MAX_NAME_BYTES + 1
#: The most types, tracked fields per type, guards per type and values in one transition map.
MAX_TYPES = 256
MAX_TRACKED_FIELDS = 64
MAX_GUARDS = 32
#: The most named parameters a rules document may declare (``commands.rules.params``).
MAX_PARAMETERS = 64
MAX_TRANSITION_STATES = 256
#: The longest CEL expression (characters) and the deepest nesting of brackets in one.
MAX_EXPRESSION_CHARS = 1024
MAX_EXPRESSION_DEPTH = 16
#: The most characters a guard (or message expression) may have with its parameters' values inline
#: (``commands.rules.params``): a literal is priced node by node, as any constant.
MAX_INLINED_CHARS = 4 * MAX_EXPRESSION_CHARS
#: The highest ``max_tracked_bytes`` a document may set.
MAX_TRACKED_BYTES_BOUND = 64 * 1024
#: The most a command's guards may cost together, in the units of ``commands.rules.cost`` (about a list element
#: compared, or a string's character read): past it the command is RULE_ERROR naming the guard that passed it, and
#: a guard whose worst case under the API's input limits passes it alone is refused at deploy.
MAX_GUARD_COST = 10_000_000
#: cel-cpp's comprehension budget per evaluation (``RuntimeOptions.comprehension_max_iterations``, cel-expr-python's
#: default): counted across every comprehension of one guard, the 10,000th iteration is an error.
CEL_MAX_ITERATIONS = 10_000
#: The deepest nesting of lists and maps in a rules document (a deeper one is refused before it is walked).
MAX_DOCUMENT_DEPTH = 64
