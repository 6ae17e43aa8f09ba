"""The what-if report as one self-contained HTML page: a table per rule and an inline SVG chart of flips over time.

No script, no external asset (no fonts, images or styles from elsewhere): it opens offline and in a mail client.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape

from app.verify.whatif import Flip, WhatIfReport

BUCKETS = 40
_W, _H, _PAD = 800, 200, 30


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def chart(flips: Sequence[Flip]) -> str:
    """Return an SVG bar chart of flips per time bucket: accepted->rejected up (red), rejected->accepted down."""
    if not flips:
        return f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="40" role="img">' \
               '<text x="10" y="25">no flips</text></svg>'
    lo = min(f.timestamp_ms for f in flips)
    hi = max(f.timestamp_ms for f in flips)
    span = max(hi - lo, 1)
    up, down = [0] * BUCKETS, [0] * BUCKETS
    for f in flips:
        i = min(BUCKETS - 1, (f.timestamp_ms - lo) * BUCKETS // span)
        (up if f.direction == "accepted->rejected" else down)[i] += 1
    top = max(max(up), max(down), 1)
    mid = _H // 2
    bar = (_W - 2 * _PAD) / BUCKETS
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H + 40}" role="img" '
             f'aria-label="flips over time">',
             f'<line x1="{_PAD}" y1="{mid}" x2="{_W - _PAD}" y2="{mid}" stroke="#555"/>']
    for i in range(BUCKETS):
        x = _PAD + i * bar
        for n, sign, colour, what in ((up[i], -1, "#c0392b", "accepted->rejected"),
                                      (down[i], 1, "#27ae60", "rejected->accepted")):
            if n:
                h = (mid - 10) * n / top
                y = mid - h if sign < 0 else mid
                parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(bar - 1, 1):.1f}" height="{h:.1f}" '
                             f'fill="{colour}"><title>{n} {what}</title></rect>')
    parts.append(f'<text x="{_PAD}" y="{_H + 20}" font-size="12">{escape(_time(lo))}</text>')
    parts.append(f'<text x="{_W - _PAD}" y="{_H + 20}" font-size="12" text-anchor="end">{escape(_time(hi))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def render(report: WhatIfReport, samples: int = 20) -> str:
    """Return the report as a complete HTML document."""
    body = report.as_dict(samples)
    rows = []
    for rule, r in sorted(body["rules"].items()):
        counts = "".join(f"<li>{escape(k)}: {v}</li>" for k, v in sorted(r["by"].items()))
        sample = "".join(
            f"<tr><td>{escape(str(s['object_id']))}</td><td>{escape(str(s['command_id']))}</td>"
            f"<td>{escape(s['kind'])}</td><td>{escape(s['topic'] or 'commands')}[{s['partition']}]@{s['offset']}</td>"
            f"<td>{escape(_time(s['timestamp_ms']))}</td><td>{escape(s['old'])}</td><td>{escape(s['new'])}</td></tr>"
            for s in r["samples"])
        rows.append(f"<section><h2>Rule {escape(rule)}: {r['flips']} flips</h2><ul>{counts}</ul>"
                    "<table><thead><tr><th>object</th><th>command</th><th>kind</th><th>record</th><th>time</th>"
                    f"<th>now</th><th>with the candidate</th></tr></thead><tbody>{sample}</tbody></table></section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Arbiter rules what-if</title>"
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}</style></head><body>"
            f"<h1>Rules what-if: {escape(report.candidate_digest)}</h1>"
            f"<p>Candidate in force from {escape(_time(report.switch_ms))}; {report.commands} commands since then "
            f"re-decided; {body['flips']} decisions flip ({body['accepted_to_rejected']} accepted&rarr;rejected, "
            f"{body['rejected_to_accepted']} rejected&rarr;accepted).</p>"
            f"<h2>Flips over time</h2>{chart(report.flips)}{''.join(rows) or '<p>No decision flips.</p>'}"
            "</body></html>\n")
