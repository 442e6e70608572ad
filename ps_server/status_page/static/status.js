// The status page's only script: polls /api/status (same origin, the browser's credentials) every 2 s,
// keeps the loss history it has seen and draws it as SVG; every value is set as text, never as HTML.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const PERIOD_MS = 2000;
let history = [];        // [version, unix time, train loss | null, eval loss | null]
let instance = null;     // server_instance: a restarted PS starts the history over

const $ = (id) => document.getElementById(id);

function text(el, value) { el.textContent = value; return el; }

function fmtBytes(n) {
  if (!n) return "0";
  const units = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return `${n.toFixed(n < 10 && i ? 1 : 0)} ${units[i]}`;
}
function fmtAge(s) {
  if (s === null || s === undefined) return "–";
  if (s < 90) return `${s.toFixed(0)} s ago`;
  if (s < 5400) return `${(s / 60).toFixed(0)} min ago`;
  return `${(s / 3600).toFixed(1)} h ago`;
}
function fmtSecs(s) {
  if (!s) return "0 s";
  return s < 120 ? `${s.toFixed(1)} s` : s < 7200 ? `${(s / 60).toFixed(1)} min` : `${(s / 3600).toFixed(1)} h`;
}
const pct = (x) => (x === null || x === undefined ? "–" : `${(100 * x).toFixed(1)}%`);
const num = (x, d = 3) => (x === null || x === undefined ? "–" : Number(x).toFixed(d));
// A paradigm's own metrics, "name value" by name ("–" when it reports none).
const metrics = (m) => {
  const entries = Object.entries(m || {});
  return entries.length ? entries.map(([k, v]) => `${k.replaceAll("_", " ")} ${num(v, 2)}`).join(", ") : "–";
};
const mass = (x) => (!x ? "0" : x >= 1e4 || x < 1e-2 ? x.toExponential(2).replace("e+", "e") : x.toPrecision(4));
const int = (x) => (x === null || x === undefined ? "–" : Math.round(x).toLocaleString("en"));

function row(cells, attrs = {}) {
  const tr = document.createElement("tr");
  for (const [k, v] of Object.entries(attrs)) tr.setAttribute(k, v);
  for (const c of cells) {
    const td = document.createElement("td");
    if (c instanceof Node) td.appendChild(c); else text(td, c);
    tr.appendChild(td);
  }
  return tr;
}

function fill(tbody, rows) { tbody.replaceChildren(...rows); }

function stateBadge(state) {
  const span = document.createElement("span");
  span.className = `state state-${state}`;
  return text(span, state);
}

function svgEl(name, attrs, content) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (content !== undefined) el.textContent = content;
  return el;
}

function drawPlot() {
  const svg = $("loss-plot");
  const W = 800, H = 260, L = 52, R = 12, T = 12, B = 34;
  const pts = history.filter((p) => p[2] !== null || p[3] !== null);
  const children = [];
  if (pts.length === 0) {
    children.push(svgEl("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no loss reported yet"));
    svg.replaceChildren(...children);
    return;
  }
  const t0 = pts[0][1];
  const span = pts[pts.length - 1][1] - t0;
  const [unit, per] = span < 120 ? ["seconds", 1] : span < 7200 ? ["minutes", 60] : ["hours", 3600];
  const xs = pts.map((p) => (p[1] - t0) / per);
  const ys = pts.flatMap((p) => [p[2], p[3]]).filter((v) => v !== null);
  const xMax = Math.max(xs[xs.length - 1], 1e-9);
  let yMin = Math.min(...ys), yMax = Math.max(...ys);
  if (yMax - yMin < 1e-6) { yMin -= 0.5; yMax += 0.5; }
  const pad = (yMax - yMin) * 0.08;
  yMin -= pad; yMax += pad;
  const X = (x) => L + (x / xMax) * (W - L - R);
  const Y = (y) => T + (1 - (y - yMin) / (yMax - yMin)) * (H - T - B);
  for (let i = 0; i <= 4; i++) {
    const y = yMin + ((yMax - yMin) * i) / 4;
    children.push(svgEl("line", { class: "grid", x1: L, x2: W - R, y1: Y(y), y2: Y(y) }));
    children.push(svgEl("text", { x: L - 6, y: Y(y) + 4, "text-anchor": "end" }, y.toFixed(2)));
  }
  for (let i = 0; i <= 4; i++) {
    const x = (xMax * i) / 4;
    children.push(svgEl("text", { x: X(x), y: H - B + 16, "text-anchor": "middle" }, x.toFixed(xMax < 10 ? 1 : 0)));
  }
  children.push(svgEl("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle" }, `${unit} since the first point`));
  children.push(svgEl("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }));
  children.push(svgEl("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }));
  for (const [col, cls] of [[2, "train"], [3, "eval"]]) {
    let d = "";
    pts.forEach((p, i) => { if (p[col] !== null) d += `${d ? "L" : "M"}${X(xs[i]).toFixed(1)},${Y(p[col]).toFixed(1)}`; });
    if (d) children.push(svgEl("path", { class: cls, d, "data-points": String(d.split(/[ML]/).length - 1) }));
  }
  const last = pts[pts.length - 1];
  const label = `v${last[0]}: train ${num(last[2])}, held-out ${num(last[3])}`;
  children.push(svgEl("text", { x: W - R, y: T + 10, "text-anchor": "end" }, label));
  svg.replaceChildren(...children);
}

function render(s) {
  text($("federation"), s.federation.name);
  text($("model"), s.federation.model);
  text($("version"), s.server.version);
  text($("active"), s.server.active_clients);
  text($("known"), s.server.known_clients);
  text($("buffered"), s.server.buffered_deltas);
  const p = s.privacy || {};
  $("privacy").hidden = !p.mode;
  if (p.mode) {
    text($("privacy"), `privacy ${p.mode}: ε ${Number(p.epsilon).toPrecision(4)}${p.budget ? " / " + p.budget : ""} ` +
      `at δ ${p.delta} after ${p.versions} versions${p.spent ? " (budget spent)" : ""}`);
  }
  text($("scope"), s.scope === "admin" ? "" : `(${s.scope})`);
  text($("updated"), `updated ${new Date(s.time * 1000).toLocaleTimeString()}`);
  text($("share-window-head"), `share (last ${s.federation.contribution_window} versions)`);
  fill(document.querySelector("#clients tbody"), s.clients.map((c) => row([
    c.client_id, c.site, stateBadge(c.state), fmtAge(c.last_sync_age_s), c.staleness ?? "–",
    fmtBytes(c.bytes_up), fmtBytes(c.bytes_down), pct(c.compression_ratio),
    c.sync_rtt_s === null ? "–" : `${c.sync_rtt_s.toFixed(2)} s`, pct(c.idle_share), c.rejoins,
    int(c.tokens), mass(c.mass), pct(c.share_window), pct(c.share_run), fmtSecs(c.compute_s),
    num(c.train_loss), num(c.eval_loss), metrics(c.paradigm_metrics),
  ], { "data-client": c.client_id, "data-state": c.state })));
  fill(document.querySelector("#sites tbody"), s.sites.map((r) => row([
    r.site || "(none)", r.clients, int(r.tokens), mass(r.mass), pct(r.share_window), pct(r.share_run),
    fmtSecs(r.compute_s),
  ])));
  const reasons = Object.entries(s.rejections);
  fill(document.querySelector("#rejections tbody"),
    reasons.length ? reasons.map(([k, v]) => row([k, int(v)])) : [row(["none", ""])]);
  const dl = $("settings");
  dl.replaceChildren(...Object.entries(s.federation).flatMap(([k, v]) => [
    text(document.createElement("dt"), k), text(document.createElement("dd"), String(v)),
  ]));
  drawPlot();
}

async function poll() {
  try {
    const since = history.length ? history[history.length - 1][0] : 0;
    const r = await fetch(`/api/status?since=${since}`, { credentials: "same-origin", cache: "no-store" });
    if (!r.ok) throw new Error(`${r.status} ${(await r.text()).trim()}`);
    const s = await r.json();
    if (instance !== s.server.server_instance) {  // a restarted PS: fetch its history from the start
      const first = instance === null;
      instance = s.server.server_instance;
      history = [];
      if (!first || since) { setTimeout(poll, 0); return; }
    }
    history = history.concat(s.history);
    render(s);
  } catch (err) {
    text($("updated"), `refresh failed: ${err.message}`);
  }
  setTimeout(poll, PERIOD_MS);
}

poll();
