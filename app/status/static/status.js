// Polls /status.json once a second and fills the page; plain DOM, no framework.
"use strict";
const fmt = (x) => (x === undefined || x === null ? "–" : typeof x === "number" ? x.toLocaleString("en") : String(x));
const set = (id, value) => { const el = document.getElementById(id); if (el) el.textContent = fmt(value); };
const cell = (text, numeric) => { const td = document.createElement("td"); td.textContent = fmt(text); if (numeric) td.className = "n"; return td; };
const row = (...cells) => { const tr = document.createElement("tr"); cells.forEach(([t, n]) => tr.appendChild(cell(t, n))); return tr; };

function render(s) {
  ["commands_in_per_s", "events_out_per_s", "rejections_out_per_s"].forEach((k) => set(k, s[k]));
  set("total_commands", s.totals.commands); set("total_events", s.totals.events); set("total_rejections", s.totals.rejections);
  const v = s.validator || {};
  ["batch_id", "batch_duration_ms", "input_rows", "state_rows", "state_memory_bytes", "ttl_evictions"].forEach((k) => set("v_" + k, v[k]));
  const reasons = document.getElementById("reasons"); reasons.replaceChildren();
  Object.entries(s.rejections_by_reason).forEach(([r, n]) => reasons.appendChild(row([r], [n, true])));
  if (!reasons.children.length) reasons.appendChild(row(["none yet"]));
  const lag = document.getElementById("lag"); lag.replaceChildren();
  Object.entries(s.lag_by_partition).forEach(([p, n]) => lag.appendChild(row(["partition " + p], [n, true])));
  const hot = document.getElementById("hot"); hot.replaceChildren();
  Object.entries(s.hot_keys).forEach(([p, keys]) => keys.forEach((k) => hot.appendChild(row([p], [k.object_id], [k.count, true]))));
  const up = document.getElementById("updated");
  up.textContent = "updated " + new Date().toLocaleTimeString() + (s.broker === "up" ? "" : " — broker " + s.broker);
  up.className = s.broker === "up" ? "" : "bad";
}

async function tick() {
  try {
    const r = await fetch("/status.json", { cache: "no-store" });
    if (r.ok) render(await r.json());
  } catch (e) {
    document.getElementById("updated").textContent = "status unavailable: " + e.message;
  }
}
tick();
setInterval(tick, 1000);
