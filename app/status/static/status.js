// Polls /status.json once a second and fills the page; plain DOM, no framework.
"use strict";
const fmt = (x) => (x === undefined || x === null ? "–" : typeof x === "number" ? x.toLocaleString("en") : String(x));
const set = (id, value) => { const el = document.getElementById(id); if (el) el.textContent = fmt(value); };
const cell = (text, numeric) => { const td = document.createElement("td"); td.textContent = fmt(text); if (numeric) td.className = "n"; return td; };
const row = (...cells) => { const tr = document.createElement("tr"); cells.forEach(([t, n]) => tr.appendChild(cell(t, n))); return tr; };

// One line per component `arbiter run` supervises; red while it is restarting or has failed.
function renderComponents(list) {
  const body = document.getElementById("components"); body.replaceChildren();
  (list || []).forEach((c) => {
    const wait = c.next_restart_at ? Math.max(0, Math.round((Date.parse(c.next_restart_at) - Date.now()) / 1000)) : null;
    const tr = row([c.name], [c.state], [c.pid == null ? null : String(c.pid), true], [c.restarts, true], [c.last_failure], [c.last_failure_at],
      [c.state === "restarting" && wait !== null ? "in " + wait + " s" : null]);
    if (c.state === "restarting" || c.state === "failed") tr.className = "bad";
    body.appendChild(tr);
  });
  if (!body.children.length) body.appendChild(row(["none reported (the API was not started by arbiter run)"]));
}

function render(s) {
  renderComponents(s.components);
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

// /status.json needs an operator's token: open the page as /#token=<token> once; it is kept in sessionStorage
// (this tab only) and removed from the address bar.
const tokenMatch = /(?:^#|&)token=([^&]+)/.exec(location.hash);
if (tokenMatch) { sessionStorage.setItem("arbiter-token", decodeURIComponent(tokenMatch[1])); history.replaceState(null, "", location.pathname + location.search); }

async function tick() {
  try {
    const token = sessionStorage.getItem("arbiter-token");
    const r = await fetch("/status.json", { cache: "no-store", headers: token ? { Authorization: "Bearer " + token } : {} });
    if (r.status === 401 || r.status === 403) {
      const up = document.getElementById("updated"); up.className = "bad";
      up.textContent = "an operator's token is needed (ARBITER_OPERATORS): open this page as /#token=<token from `arbiter token <operator>`>";
    }
    if (r.ok) render(await r.json());
  } catch (e) {
    document.getElementById("updated").textContent = "status unavailable: " + e.message;
  }
}
tick();
setInterval(tick, 1000);
