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

// Bytes in binary units; "–" when unknown (never a zero nobody measured).
const bytes = (n) => {
  if (n === undefined || n === null) return null;
  const units = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + " " + units[i];
};
const used = (a, b) => (a === undefined || a === null ? null : bytes(a) + (b ? " / " + bytes(b) : ""));

// The validator's state: Spark's state operators (reference backend) or the rocksdb shard servers' files.
function renderState(st) {
  st = st || {};
  set("s_source", st.source ? "(" + st.source + ")" : "(no figures yet)");
  set("s_rows", st.rows);
  set("s_memory", used(st.memory_bytes, st.memory_limit_bytes));
  set("s_memtable", used(st.memtable_bytes, st.write_buffer_limit_bytes));
  set("s_sst_bytes", bytes(st.sst_bytes));
  set("s_restores", st.restores === undefined ? null : st.restores + ", " + (st.restore_ms / 1000).toFixed(1) + " s, " + bytes(st.restore_bytes));
  set("s_snapshots", st.snapshots === undefined ? null : st.snapshots + ", " + (st.snapshot_ms / 1000).toFixed(1) + " s, " + bytes(st.snapshot_bytes));
  set("s_changelog_bytes", bytes(st.changelog_bytes));
  const lastBatch = st.ttl_evictions_last_batch !== undefined;
  set("s_ttl_evictions", lastBatch ? st.ttl_evictions_last_batch : st.ttl_evictions);
  set("s_ttl_label", lastBatch ? "TTL evictions (last batch)" : "TTL evictions (since the servers started)");
  set("s_servers", st.servers_live === undefined ? null : st.servers_live + " (" + st.shards + ")");
  // Which path decides (app.native.core): records through the compiled core, the rest by the Python fold.
  set("s_core", st.core_records === undefined ? null : st.core_records + " of " + st.records +
    (st.records ? " (" + (100 * st.core_records / st.records).toFixed(0) + " %)" : ""));
}

// The parking lot: counts by status and the last parked records with their coordinates (null: not readable).
function renderParked(pl) {
  ["parked", "redriven", "discarded"].forEach((k) => set("pl_" + k, pl ? pl[k] : null));
  const body = document.getElementById("parked"); body.replaceChildren();
  (pl ? pl.recent : []).forEach((r) => body.appendChild(row([r.origin], [r.reason], [r.status],
    [pl.topic + r.parked_at], [r.value_bytes, true], [r.rejection_id])));
  if (!body.children.length) body.appendChild(row([pl ? "nothing parked" : "–"]));
}

// Charts of the last 15 minutes (uPlot, served from /vendor): the API keeps a point a second in s.history.
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
  "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"];
const CHARTS = [
  ["chart_flow", "per second: commands in, events and rejections out",
    [["commands_in", "commands in"], ["events_out", "events out"], ["rejections_out", "rejections out"]]],
  ["chart_latency", "decision latency (ms, issued → seen by the API)", [["latency_p50_ms", "p50"], ["latency_p99_ms", "p99"]]],
  ["chart_lag", "lag per partition (commands not yet validated)", null],
  ["chart_state_rows", "validator state rows", [["state_rows", "rows"]]],
  ["chart_state_memory", "validator state memory", [["state_memory_bytes", "memory"]], bytes],
];
const charts = {};
window.arbiterCharts = charts; // read by the status page's browser test

function lagSeries(h) {
  const parts = Object.keys(h).filter((k) => /^lag_\d+$/.test(k)).sort((a, b) => +a.slice(4) - +b.slice(4));
  return parts.length ? parts.map((k) => [k, "partition " + k.slice(4)]) : [["lag_total", "total"]];
}

function renderCharts(h) {
  if (!h || !h.t || typeof uPlot === "undefined") return;
  CHARTS.forEach(([id, title, fixed, unit]) => {
    const series = fixed || lagSeries(h);
    const data = [h.t, ...series.map(([k]) => h[k] || h.t.map(() => null))];
    const sig = series.map(([k]) => k).join(",");
    let c = charts[id];
    if (c && c.sig !== sig) { c.plot.destroy(); c = null; }
    if (c) { c.plot.setData(data); return; }
    const el = document.getElementById(id);
    const opts = {
      title, width: Math.max(300, el.clientWidth || 480), height: 180,
      series: [{}, ...series.map(([, label], i) => ({ label, stroke: COLORS[i % COLORS.length], width: 1.5 }))],
      axes: [{}, unit ? { size: 80, values: (u, splits) => splits.map(unit) } : { size: 70 }],
    };
    charts[id] = { sig, plot: new uPlot(opts, data, el) };
  });
}

function render(s) {
  renderComponents(s.components);
  renderCharts(s.history);
  ["commands_in_per_s", "events_out_per_s", "rejections_out_per_s"].forEach((k) => set(k, s[k]));
  set("total_commands", s.totals.commands); set("total_events", s.totals.events); set("total_rejections", s.totals.rejections); set("change_subscribers", s.change_subscribers);
  const c = s.claims;  // the Idempotency-Keys' claims reader (app/api/writes/claims.py)
  set("claims_ready", c ? (c.ready && c.alive ? "caught up" : "not caught up") + (c.error ? " — " + c.error : "") : "none");
  ["lag", "position", "holders", "principals", "skipped"].forEach((k) => set("claims_" + k, c ? c[k] : null));
  const v = s.validator || {};
  ["batch_id", "batch_duration_ms", "input_rows"].forEach((k) => set("v_" + k, v[k]));
  renderState(v.state);
  const h = s.read_model_history;  // the read model's history store (GET /objects/{id}/events)
  set("rm_history", h ? h.events.toLocaleString("en") + " events, " + bytes(h.bytes) : null);
  const reasons = document.getElementById("reasons"); reasons.replaceChildren();
  Object.entries(s.rejections_by_reason).forEach(([r, n]) => reasons.appendChild(row([r], [n, true])));
  if (!reasons.children.length) reasons.appendChild(row(["none yet"]));
  const versions = document.getElementById("rules_versions"); versions.replaceChildren();
  Object.entries(s.rules_version_by_partition || {}).forEach(([p, v]) => versions.appendChild(row(["partition " + p], ["rules v" + v])));
  if (!versions.children.length) versions.appendChild(row(["no rules yet"]));
  const byRule = document.getElementById("rule_rejections"); byRule.replaceChildren();
  Object.entries(s.rejections_by_rule || {}).forEach(([r, n]) => byRule.appendChild(row([r], [n, true])));
  if (!byRule.children.length) byRule.appendChild(row(["no rule rejections yet"]));
  const warned = document.getElementById("rule_warnings"); warned.replaceChildren();
  Object.entries(s.warnings_by_rule || {}).forEach(([r, n]) => warned.appendChild(row([r], [n, true])));
  if (!warned.children.length) warned.appendChild(row(["no would-be refusals yet"]));
  renderParked(s.parking_lot);
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
