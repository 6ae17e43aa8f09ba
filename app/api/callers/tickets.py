"""Change-feed tickets: short-lived, principal-bound credentials a browser's ``EventSource`` can put in its URL.

``EventSource`` cannot send an ``Authorization`` header, and a bearer token in a URL leaks into logs, history and
proxies for its whole life (OWASP: no session tokens in URLs). So a page trades its token for a ticket
(``POST /changes/tickets``) and opens ``GET /changes?ticket=...`` (or ``/objects/{id}/changes``) with it:

* **Signed, not stored.** ``t1.<payload>.<mac>``: the caller's principal, groups and issuer, the ticket's expiry
  (``ARBITER_CHANGES_TICKET_TTL_S``), its token's expiry and a random nonce, HMAC-SHA256'd with a key derived from
  ``ARBITER_AUTH_SECRET`` — any API process (or host with the same secret) can check it.
* **Single use to open.** Its first use creates ``<var_dir>/change-tickets/<nonce>`` with ``O_CREAT | O_EXCL``
  (atomic across the processes of one host, so across ``arbiter api --workers N``); any later use without
  ``Last-Event-ID``, or after the ticket's expiry, is refused.
* **Resumable by the browser.** ``EventSource`` reconnects by itself with the same URL and ``Last-Event-ID``. Such a
  request is admitted with the used ticket only while no stream of that ticket is open (the stream holds an
  ``flock`` on the file for its life, released by the kernel if the process dies) and within
  ``ARBITER_CHANGES_TICKET_RESUME_S`` of the moment its last stream ended or, if its process died, last sent
  something (written into the file), and never after its token's expiry. So a leaked ticket URL opens nothing
  while its stream runs, nothing after its expiry unless it resumes a stream that just ended, and nothing once its
  token expires.

Holds per host: with several API hosts behind one address, a ticket could be opened once on each host.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from app.api.callers.auth import READ, Caller, Unauthorized

PREFIX = "t1."
#: Longest ticket text accepted: a caller's 32 groups of 64 characters and a resume id of RESUME_ID_CHARS fit.
MAX_TICKET_CHARS = 8192
#: Longest ``Last-Event-ID`` a ticket may carry (an id of a few hundred partitions).
RESUME_ID_CHARS = 2048
_PRUNE_EVERY_S = 60.0


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True, slots=True)
class Ticket:
    """What a ticket says, once its MAC is verified."""

    principal: str
    groups: tuple[str, ...]
    issuer: str
    expires_at: float
    token_expires_at: float
    nonce: str
    resume_from: str | None = None

    def caller(self) -> Caller:
        """The caller a stream opened with this ticket runs as: read scope only, until its token's expiry."""
        return Caller(self.principal, frozenset({READ}), self.groups, self.issuer, None, self.token_expires_at)


class Redemption:
    """A stream's hold on its ticket: ``close`` records when the stream ended (the start of its resume window).

    ``touch`` records, while the stream runs, when it last sent something: if its process dies (kill -9, an API
    restart) the kernel releases the ``flock`` and the file holds that time, so the browser's own reconnect is
    admitted within the resume window of the stream's last sign of life, as after a clean end.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def _stamp(self, now: float) -> None:
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, repr(now).encode(), 0)

    def touch(self, now: float) -> None:
        if self._fd >= 0:
            self._stamp(now)

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            self._stamp(time.time())
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)
            self._fd = -1


class TicketBook:
    """Issues and redeems tickets; ``directory`` is shared by every API process of the host."""

    def __init__(self, secret: str, directory: Path, *, ttl_s: float, resume_s: float) -> None:
        self._key = hmac.new(secret.encode(), b"arbiter change-feed ticket key v1", hashlib.sha256).digest()
        self.directory = directory
        self.ttl_s = ttl_s
        self.resume_s = resume_s
        self._pruned = 0.0

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._key, (PREFIX + body).encode(), hashlib.sha256).digest())

    def issue(self, caller: Caller, resume_from: str | None = None) -> tuple[str, float]:
        """Return a new ticket for ``caller`` and its lifetime in seconds (never past the caller's token).

        ``resume_from``: a ``Last-Event-ID`` its first stream resumes from when the request carries none, so a page
        whose old ticket was refused subscribes again with a new one without a gap (a new ``EventSource`` cannot
        send the header)."""
        now = time.time()
        expires = min(now + self.ttl_s, caller.expires_at)
        payload = {"p": caller.principal, "g": list(caller.groups), "i": caller.issuer, "x": expires,
                   "t": caller.expires_at, "n": secrets.token_urlsafe(18)}
        if resume_from is not None:
            payload["r"] = resume_from
        body = _b64(json.dumps(payload, separators=(",", ":")).encode())
        self._prune(now)
        return f"{PREFIX}{body}.{self._mac(body)}", max(0.0, expires - now)

    def verify(self, text: str) -> Ticket:
        """Return the ticket ``text`` names if its MAC holds; raise ``Unauthorized``."""
        if len(text) > MAX_TICKET_CHARS or not text.startswith(PREFIX) or text.count(".") != 2:
            raise Unauthorized("the change-feed ticket is malformed")
        body, mac = text[len(PREFIX):].split(".")
        if not hmac.compare_digest(mac, self._mac(body)):
            raise Unauthorized("the change-feed ticket is not one of ours")
        try:
            p = json.loads(_unb64(body))
            return Ticket(str(p["p"]), tuple(str(g) for g in p["g"]), str(p["i"]), float(p["x"]), float(p["t"]),
                          str(p["n"]), str(p["r"]) if "r" in p else None)
        except (ValueError, KeyError, TypeError) as e:  # a MAC'd body is ours: only a bug gets here
            raise Unauthorized("the change-feed ticket is malformed") from e

    def redeem(self, text: str, *, resuming: bool) -> tuple[Ticket, Redemption]:
        """Admit one stream with ticket ``text`` (``resuming``: the request carries ``Last-Event-ID``); raise
        ``Unauthorized`` if the ticket is bad, expired, already used, or its stream is still open."""
        ticket = self.verify(text)
        now = time.time()
        if now >= ticket.token_expires_at:
            raise Unauthorized("the change-feed ticket's token has expired")
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / ticket.nonce
        if now < ticket.expires_at:
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            except FileExistsError:
                return ticket, self._resume(path, now, resuming)
            try:  # just created, so free: a racer that opened it first finds it empty (open) and lets go
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # never blocks the event loop
            except BlockingIOError as e:
                os.close(fd)
                raise Unauthorized("the change-feed ticket's stream is still open") from e
            return ticket, Redemption(fd)
        if not resuming:
            raise Unauthorized("the change-feed ticket has expired; get a new one")
        return ticket, self._resume(path, now, resuming)

    def _resume(self, path: Path, now: float, resuming: bool) -> Redemption:
        if not resuming:
            raise Unauthorized("the change-feed ticket was already used; get a new one")
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError as e:  # expired before it was ever used
            raise Unauthorized("the change-feed ticket has expired; get a new one") from e
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as e:
                raise Unauthorized("the change-feed ticket's stream is still open") from e
            ended = os.pread(fd, 64, 0).decode(errors="replace")
            if not ended:  # its stream is being opened, or its process died before it sent anything
                raise Unauthorized("the change-feed ticket's stream did not end; get a new ticket")
            if now - float(ended) > self.resume_s:
                raise Unauthorized("the change-feed ticket's resume window has passed; get a new one")
            os.ftruncate(fd, 0)  # open again
        except BaseException:
            os.close(fd)  # releases the lock too
            raise
        return Redemption(fd)

    def _prune(self, now: float) -> None:
        """Delete, at most once a minute, the files of tickets that can no longer be opened or resumed."""
        if now - self._pruned < _PRUNE_EVERY_S or not self.directory.is_dir():
            return
        self._pruned = now
        horizon = now - (self.ttl_s + self.resume_s + _PRUNE_EVERY_S)
        for entry in os.scandir(self.directory):
            try:
                if entry.stat().st_mtime >= horizon:
                    continue
                fd = os.open(entry.path, os.O_RDWR)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # an open stream's file stays
                    os.unlink(entry.path)
                except BlockingIOError:
                    pass
                finally:
                    os.close(fd)
            except FileNotFoundError:
                continue
