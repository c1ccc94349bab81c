/* explorer.js: the attnbias explorer page.  Every number on the page comes
 * from the server -- POST /v1/analysis, /v1/rope and /v1/bias -- and is
 * drawn here with small SVG and canvas code of our own (no library, nothing
 * fetched from elsewhere; the Content-Security-Policy forbids both).  A
 * change to any field redraws after a short pause; an error the server
 * names a field for is shown next to that field. */
"use strict";

/* ==== presets: explicit fields of a few model families ================== */

const PRESETS = {
  "Llama 3.1 8B (llama3 scaling)": {
    family: "rope", seq_len: 131072, head_dim: 128, rope_theta: 500000,
    partial_rotary_factor: 1, max_position_embeddings: 131072,
    rope_scaling: {rope_type: "llama3", factor: 8, low_freq_factor: 1, high_freq_factor: 4,
                   original_max_position_embeddings: 8192},
  },
  "Llama 2 7B (4k, planning 16k)": {
    family: "rope", seq_len: 16384, head_dim: 128, rope_theta: 10000,
    partial_rotary_factor: 1, max_position_embeddings: 4096, rope_scaling: null,
  },
  "Mistral 7B v0.1": {
    family: "rope", seq_len: 32768, head_dim: 128, rope_theta: 10000,
    partial_rotary_factor: 1, max_position_embeddings: 32768, rope_scaling: null,
  },
  "Qwen2.5 7B with YaRN x4": {
    family: "rope", seq_len: 131072, head_dim: 128, rope_theta: 1000000,
    partial_rotary_factor: 1, max_position_embeddings: 131072,
    rope_scaling: {rope_type: "yarn", factor: 4, original_max_position_embeddings: 32768},
  },
  "DeepSeek-V2 (YaRN x40, mscale)": {
    family: "rope", seq_len: 163840, head_dim: 64, rope_theta: 10000,
    partial_rotary_factor: 1, max_position_embeddings: 163840,
    rope_scaling: {rope_type: "yarn", factor: 40, original_max_position_embeddings: 4096,
                   beta_fast: 32, beta_slow: 1, mscale: 0.707, mscale_all_dim: 0.707},
  },
  "Pythia / GPT-NeoX (rotary_pct 0.25)": {
    family: "rope", seq_len: 8192, head_dim: 128, rope_theta: 10000,
    partial_rotary_factor: 0.25, max_position_embeddings: 2048, rope_scaling: null,
  },
  "BLOOM-560m (ALiBi, 16 heads)": {
    family: "alibi", seq_len: 2048, num_heads: 16, max_bias: 8, head: 0, causal: true,
  },
  "MPT-7B (ALiBi, 32 heads)": {
    family: "alibi", seq_len: 2048, num_heads: 32, max_bias: 8, head: 4, causal: true,
  },
  "T5-base (32 buckets, random table)": {
    family: "t5", seq_len: 512, num_heads: 12, relative_attention_num_buckets: 32,
    relative_attention_max_distance: 128, bidirectional: true, head: 0, causal: false,
  },
  "Kerple log, 4 heads": {
    family: "kerple", seq_len: 1024, num_heads: 4, variant: "log",
    r1: [2, 1, 0.5, 0.25], r2: [1, 0.5, 0.25, 0.125], head: 0, causal: true,
  },
};

const HEATMAP_MAX = 128;  /* cells a side of the heatmap */
const QK_MAX = 1024;      /* distances of the q.k curve (cos table rows) */
const BIAS_CURVE_MAX = 8192;
const PALETTE = ["#0072b2", "#e69f00", "#009e73", "#d55e00", "#cc79a7", "#56b4e9",
                 "#f0e442", "#000000"];

const $ = (id) => document.getElementById(id);

/* ==== the server ======================================================== */

let apiKey = sessionStorage.getItem("attnbias-key") || "";

class Problem extends Error {
  constructor(status, body) {
    super(body && body.detail ? body.detail : "HTTP " + status);
    this.status = status;
    this.field = body && body.field;
  }
}

async function post(path, body, signal) {
  const headers = {"Content-Type": "application/json", "Accept": "application/json"};
  if (apiKey) headers["Authorization"] = "Bearer " + apiKey;
  const r = await fetch(path, {method: "POST", headers, body: JSON.stringify(body), signal});
  const text = await r.text();
  let data = null;
  try { data = JSON.parse(text); } catch (e) { data = null; }
  if (!r.ok) throw new Problem(r.status, data);
  return data;
}

/* A tensor of an answer as a flat array (numbers, b64 float32 or int32);
 * "inf" and "nan" strings become numbers. */
function values(t) {
  if (!t) return [];
  if (t.b64 !== undefined) {
    const bin = atob(t.b64), bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return Array.from(t.dtype === "int32" ? new Int32Array(bytes.buffer)
                                          : new Float32Array(bytes.buffer));
  }
  return t.data.map((v) => (typeof v === "string" ? Number(v.replace("inf", "Infinity")) : v));
}

function rows(t) {
  const v = values(t), n = t.shape[t.shape.length - 1], out = [];
  for (let i = 0; i < v.length; i += n) out.push(v.slice(i, i + n));
  return out;
}

/* ==== SVG charts ========================================================= */

const SVGNS = "http://www.w3.org/2000/svg";

function el(parent, name, attrs, text) {
  const e = document.createElementNS(SVGNS, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  parent.appendChild(e);
  return e;
}

function fmt(v) {
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 1e6 || a < 1e-3) return v.toExponential(1).replace("e+", "e").replace(".0e", "e");
  return String(Number(v.toPrecision(6)));
}

/* A tick of a log axis (t = log10 of the value): powers of ten from 1e4
 * on as 1e4, 1e5, ... so that the labels stay short. */
function fmtLog(t) {
  const v = Math.pow(10, t);
  return Number.isInteger(t) && (t >= 4 || t <= -3) ? `1e${t}` : fmt(Number(v.toPrecision(3)));
}

/* Round ticks: 1, 2, 2.5, 5 x 10^k on a linear axis; powers of ten (and 2,
 * 5 between when the range is short) on a log one.  lo, hi transformed. */
function ticks(lo, hi, log, pixels) {
  const out = [], most = Math.max(2, Math.min(8, Math.floor(pixels / 64)));
  if (!log) {
    const raw = (hi - lo) / most, p = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * p).find((s) => s >= raw);
    for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-12 * step; v += step)
      out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    return out;
  }
  const e0 = Math.ceil(lo), e1 = Math.floor(hi);
  const every = Math.max(1, Math.ceil((e1 - e0 + 1) / most));
  for (let e = e0; e <= e1; e += every) out.push(e);
  if (e1 - e0 < 2)
    for (let e = Math.floor(lo); e <= hi; e++)
      for (const s of [Math.log10(2), Math.log10(5)])
        if (e + s >= lo && e + s <= hi) out.push(e + s);
  return out.sort((a, b) => a - b);
}

/* A line chart: series [{label, x (or null: 0, 1, ...), y, dash, steps,
 * markers, colour}], optional marks [{x | y, label}], log axes, xDomain
 * (an x range always shown: every head, even one with nothing to draw),
 * legendPick (the series the legend names, default the first 24; the
 * others are "+N more"). */
function lineChart(svg, o) {
  svg.textContent = "";
  /* Drawn at the size it is shown, so that text keeps its size.  The
   * legend stands beside the plot, or below it when the chart is narrow. */
  const W = Math.max(300, Math.round(svg.getBoundingClientRect().width) || 640);
  const below = W < 560, CH = 7.2; /* an average character, pixels */
  const labels = o.series.map((s) => s.label);
  const shown = (o.legendPick || labels.map((_, k) => k).slice(0, 24))
    .filter((k) => k < labels.length);
  const longest = Math.max(0, ...shown.map((k) => labels[k].length));
  const legend = [];  /* [x, y] of each entry shown (of shown[slot]) */
  let legendH = 0, moreAt = null;
  if (below) {
    let x = 0, y = 0;
    const place = (w) => {
      if (x > 0 && x + w > W - 62 - 16) { x = 0; y += 18; }
      const at = [x, y];
      x += w + 10;
      return at;
    };
    for (const k of shown) legend.push(place(40 + CH * labels[k].length));
    /* "+N more" flows on after the entries, inside the picture. */
    if (labels.length > shown.length) moreAt = place(CH * 10);
    legendH = legend.length ? y + 24 : 0;
  }
  const L = 62, R = below ? 16 : Math.min(Math.round(W * 0.4), 56 + 8 * longest), T = 14;
  const B = 44 + legendH;
  const H = Math.round(Math.min(340, Math.max(220, (W - R) * 0.6))) + legendH;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  if (!below) {
    const fit = Math.max(2, Math.floor((H - T - B) / 18));
    const slots = Math.min(shown.length, labels.length <= fit ? fit : fit - 1);
    for (let j = 0; j < slots; j++) legend.push([0, 18 * j]);
  }
  const legendAt = below ? [L, H - legendH + 6] : [W - R + 10, T + 2];
  const xs = [Infinity, -Infinity], ys = [Infinity, -Infinity];
  const tx = (v) => (o.xlog ? Math.log10(v) : v), ty = (v) => (o.ylog ? Math.log10(v) : v);
  const okx = (v) => Number.isFinite(v) && (!o.xlog || v > 0);
  const oky = (v) => Number.isFinite(v) && (!o.ylog || v > 0);
  const grow = (r, v) => { r[0] = Math.min(r[0], v); r[1] = Math.max(r[1], v); };
  for (const s of o.series)
    s.y.forEach((y, i) => {
      const x = s.x ? s.x[i] : i;
      if (okx(x) && oky(y)) { grow(xs, tx(x)); grow(ys, ty(y)); }
    });
  for (const m of o.marks || []) {
    if (m.x !== undefined && okx(m.x)) grow(xs, tx(m.x));
    if (m.y !== undefined && oky(m.y)) grow(ys, ty(m.y));
  }
  if (!(xs[0] <= xs[1])) {
    el(svg, "text", {x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty"},
       o.empty || "nothing to draw");
    return;
  }
  if (o.xDomain) for (const v of o.xDomain) if (okx(v)) grow(xs, tx(v));
  for (const r of [xs, ys]) {
    if (r[1] - r[0] < 1e-12 * Math.max(1, Math.abs(r[1]))) { r[0] -= 0.5; r[1] += 0.5; }
    const pad = 0.04 * (r[1] - r[0]);
    r[0] -= pad; r[1] += pad;
  }
  const px = (v) => L + (tx(v) - xs[0]) / (xs[1] - xs[0]) * (W - L - R);
  const py = (v) => H - B - (ty(v) - ys[0]) / (ys[1] - ys[0]) * (H - T - B);
  for (const t of ticks(xs[0], xs[1], o.xlog, W - L - R)) {
    const x = L + (t - xs[0]) / (xs[1] - xs[0]) * (W - L - R);
    el(svg, "line", {x1: x, x2: x, y1: T, y2: H - B, class: "grid"});
    el(svg, "text", {x, y: H - B + 16, "text-anchor": "middle"}, o.xlog ? fmtLog(t) : fmt(t));
  }
  for (const t of ticks(ys[0], ys[1], o.ylog, (H - T - B) * 1.6)) {
    const y = H - B - (t - ys[0]) / (ys[1] - ys[0]) * (H - T - B);
    el(svg, "line", {x1: L, x2: W - R, y1: y, y2: y, class: "grid"});
    el(svg, "text", {x: L - 6, y: y + 4, "text-anchor": "end"}, o.ylog ? fmtLog(t) : fmt(t));
  }
  el(svg, "text", {x: (L + W - R) / 2, y: H - legendH - 8, "text-anchor": "middle"}, o.xlabel);
  el(svg, "text", {x: 14, y: (T + H - B) / 2, "text-anchor": "middle",
                   transform: `rotate(-90 14 ${(T + H - B) / 2})`}, o.ylabel);
  (o.marks || []).forEach((m, i) => {
    if (m.x !== undefined && okx(m.x)) {
      const x = px(m.x);
      el(svg, "line", {x1: x, x2: x, y1: T, y2: H - B, class: "mark"});
      const w = CH * m.label.length, right = x + 4 + w < W - R, left = x - 4 - w > L;
      el(svg, "text", {x: right ? x + 4 : left ? x - 4 : L + 4, y: T + 14 + 14 * i,
                       class: "marklabel", "text-anchor": right || !left ? "start" : "end"},
         m.label);
    } else if (m.y !== undefined && oky(m.y)) {
      const y = py(m.y);
      el(svg, "line", {x1: L, x2: W - R, y1: y, y2: y, class: "mark"});
      el(svg, "text", {x: L + 6, y: y - 5, class: "marklabel"}, m.label);
    }
  });
  const clip = `c${Math.random().toString(36).slice(2)}`;
  el(el(svg, "clipPath", {id: clip}), "rect", {x: L, y: T, width: W - L - R, height: H - T - B});
  o.series.forEach((s, k) => {
    const colour = s.colour || PALETTE[k % PALETTE.length];
    const pts = decimate(s, px, py, okx, oky, o.series.length > 1 ? 1 : 0);
    const d = path(pts, s.steps);
    if (d) el(svg, "path", {d, fill: "none", stroke: colour, "stroke-width": s.markers ? 1 : 2,
                            "stroke-dasharray": s.dash ? "6 4" : "none", "clip-path": `url(#${clip})`,
                            "stroke-linejoin": "round"});
    if (s.markers)
      for (const seg of pts) for (const [x, y] of seg) el(svg, "circle", {cx: x, cy: y, r: 3.5, fill: colour});
    const slot = shown.indexOf(k);
    if (slot >= 0 && slot < legend.length) {
      const lx = legendAt[0] + legend[slot][0], ly = legendAt[1] + legend[slot][1] + 6;
      el(svg, "line", {x1: lx, x2: lx + 24, y1: ly, y2: ly, stroke: colour, "stroke-width": 2,
                       "stroke-dasharray": s.dash ? "6 4" : "none"});
      el(svg, "text", {x: lx + 30, y: ly + 4}, s.label);
    }
  });
  if (labels.length > legend.length) {
    const last = legend[legend.length - 1] || [0, -18];
    const at = moreAt ? [legendAt[0] + moreAt[0], legendAt[1] + moreAt[1] + 10]
                      : [legendAt[0] + 30, legendAt[1] + last[1] + 28];
    el(svg, "text", {x: at[0], y: at[1]}, `+${labels.length - legend.length} more`);
  }
  el(svg, "rect", {x: L, y: T, width: W - L - R, height: H - T - B, class: "frame"});
  svg.dataset.draws = String(Number(svg.dataset.draws || 0) + 1);
}

/* Pixel points of a series as runs without gaps; more points than pixel
 * columns are reduced to each column's first, lowest, highest and last. */
function decimate(s, px, py, okx, oky) {
  const runs = [];
  let run = [], col = null, bucket = [];
  const flush = () => {
    if (!bucket.length) return;
    let lo = bucket[0], hi = bucket[0];
    for (const p of bucket) { if (p[1] < lo[1]) lo = p; if (p[1] > hi[1]) hi = p; }
    const keep = [bucket[0], lo, hi, bucket[bucket.length - 1]];
    for (const p of keep) if (run[run.length - 1] !== p) run.push(p);
    bucket = [];
  };
  const many = s.y.length > 1500;
  for (let i = 0; i < s.y.length; i++) {
    const x = s.x ? s.x[i] : i, y = s.y[i];
    if (!okx(x) || !oky(y)) { flush(); if (run.length) runs.push(run); run = []; col = null; continue; }
    const p = [px(x), py(y)];
    if (!many) { run.push(p); continue; }
    const c = Math.floor(p[0]);
    if (c !== col) { flush(); col = c; }
    bucket.push(p);
  }
  flush();
  if (run.length) runs.push(run);
  return runs;
}

function path(runs, steps) {
  let d = "";
  for (const run of runs) {
    run.forEach(([x, y], i) => {
      if (i === 0) d += `M${x.toFixed(1)},${y.toFixed(1)}`;
      else if (steps) d += `H${x.toFixed(1)}V${y.toFixed(1)}`;
      else d += `L${x.toFixed(1)},${y.toFixed(1)}`;
    });
  }
  return d;
}

/* ==== heatmap ============================================================ */

const VIRIDIS = [[68, 1, 84], [72, 36, 117], [65, 68, 135], [53, 95, 141], [42, 120, 142],
                 [33, 145, 140], [34, 168, 132], [68, 191, 112], [122, 209, 81],
                 [189, 223, 38], [253, 231, 37]];

function viridis(t) {
  t = Math.max(0, Math.min(1, t)) * 10;
  const i = Math.min(9, Math.floor(t)), f = t - i;
  return VIRIDIS[i].map((c, k) => Math.round(c + f * (VIRIDIS[i + 1][k] - c)));
}

function heatmap(canvas, table, n, q0) {
  const ctx = canvas.getContext("2d"), cell = Math.max(1, Math.floor(360 / n));
  canvas.width = canvas.height = cell * n;
  let lo = Infinity, hi = -Infinity;
  for (const v of table) if (Number.isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  const img = ctx.createImageData(cell * n, cell * n);
  for (let r = 0; r < n; r++)
    for (let c = 0; c < n; c++) {
      const v = table[r * n + c];
      const rgb = Number.isFinite(v) ? viridis(hi > lo ? (v - lo) / (hi - lo) : 0.5) : [150, 150, 150];
      for (let y = 0; y < cell; y++)
        for (let x = 0; x < cell; x++) {
          const o = ((r * cell + y) * cell * n + c * cell + x) * 4;
          img.data[o] = rgb[0]; img.data[o + 1] = rgb[1]; img.data[o + 2] = rgb[2]; img.data[o + 3] = 255;
        }
    }
  ctx.putImageData(img, 0, 0);
  canvas.dataset.draws = String(Number(canvas.dataset.draws || 0) + 1);
  $("heatmap-scale").textContent =
    `queries ${q0}..${q0 + n - 1} (rows) x keys 0..${q0 + n - 1} (columns); ` +
    `colour from ${fmt(lo)} (dark) to ${fmt(hi)} (yellow)`;
}

/* ==== the form =========================================================== */

const FIELDS = ["seq_len", "head_dim", "rope_theta", "partial_rotary_factor", "max_position_embeddings",
                "rope_scaling", "num_heads", "max_bias", "relative_attention_num_buckets",
                "relative_attention_max_distance", "bidirectional", "variant", "r1", "r2", "head",
                "causal"];

function setForm(p) {
  $("family").value = p.family;
  for (const f of FIELDS) {
    const e = $(f);
    if (!(f in p)) continue;
    if (e.type === "checkbox") e.checked = !!p[f];
    else if (f === "rope_scaling") e.value = p[f] ? JSON.stringify(p[f], null, 1) : "";
    else if (Array.isArray(p[f])) e.value = JSON.stringify(p[f]);
    else e.value = p[f];
  }
  showFamily();
}

function showFamily() {
  const fam = $("family").value;
  for (const e of document.querySelectorAll("[data-family]"))
    e.hidden = !e.dataset.family.split(" ").includes(fam);
}

/* A field's value for a request: numbers as numbers, lists and the
 * rope_scaling object parsed; what cannot be parsed is sent as written, so
 * that the server names it. */
function val(id) {
  const e = $(id);
  if (e.type === "checkbox") return e.checked;
  const s = e.value.trim();
  if (e.type === "number") return s === "" ? undefined : Number(s);
  if (id === "rope_scaling" || id === "r1" || id === "r2") {
    if (s === "") return undefined;
    try { return JSON.parse(s); } catch (err) { return s; }
  }
  return s;
}

function ropeFields() {
  const o = {};
  for (const f of ["head_dim", "rope_theta", "partial_rotary_factor", "max_position_embeddings",
                   "rope_scaling"]) {
    const v = val(f);
    if (v !== undefined) o[f] = v;
  }
  return o;
}

/* T5's table: a fixed pseudo-random one (no checkpoint ships with the
 * page), decreasing with the bucket as trained tables roughly do. */
function t5Table(nb, H) {
  let s = 12345;
  const rnd = () => ((s = (s * 1103515245 + 12345) % 2147483648) / 2147483648);
  const t = [];
  for (let b = 0; b < nb; b++) {
    const row = [];
    for (let h = 0; h < H; h++) row.push(-0.25 * (b % (nb / 2)) * (0.5 + rnd()) + 0.3 * rnd());
    t.push(row);
  }
  return t;
}

function biasFields(headOnly, H) {
  const fam = $("family").value, h = val("head") || 0, o = {method: fam};
  if (fam === "alibi") {
    if (val("max_bias") !== undefined) o.max_bias = val("max_bias");
  } else if (fam === "t5") {
    o.relative_attention_max_distance = val("relative_attention_max_distance");
    o.bidirectional = val("bidirectional");
    const nb = val("relative_attention_num_buckets");
    const table = t5Table(nb > 0 && nb < 4096 ? nb : 32, H);
    o.table = headOnly ? table.map((r) => [r[Math.min(h, H - 1)]]) : table;
    o.relative_attention_num_buckets = nb;
  } else if (fam === "kerple") {
    o.variant = val("variant");
    o.r1 = val("r1");
    o.r2 = val("r2");
    if (headOnly && Array.isArray(o.r1) && Array.isArray(o.r2)) { o.r1 = [o.r1[h]]; o.r2 = [o.r2[h]]; }
  }
  return o;
}

/* ==== errors ============================================================= */

function clearErrors() {
  for (const e of document.querySelectorAll(".controls .err")) e.textContent = "";
  for (const e of document.querySelectorAll(".invalid")) e.classList.remove("invalid");
}

/* Show the server's message next to the field its pointer names (the
 * longest match: /rope_scaling/factor belongs to the rope_scaling box). */
function showError(err) {
  if (err.name === "AbortError") return;
  if (err.status === 401) { askKey(err.message); return; }
  let best = null;
  for (const e of document.querySelectorAll("[data-field]")) {
    const f = e.dataset.field;
    if (err.field && (err.field === f || err.field.startsWith(f + "/")) &&
        (!best || f.length > best.dataset.field.length) && !e.closest("[hidden]"))
      best = e;
  }
  if (best) {
    best.classList.add("invalid");
    best.parentElement.querySelector(".err").textContent = err.message;
  } else {
    $("error").textContent = (err.field ? err.field + ": " : "") + err.message;
  }
}

function askKey(message) {
  $("keyform").hidden = false;
  $("apikey-err").textContent = apiKey ? message : "";
  $("status").textContent = "waiting for the API key";
  for (const svg of document.querySelectorAll(".charts figure:not([hidden]) svg"))
    lineChart(svg, {series: [], empty: "waiting for the API key (above)"});
}

/* ==== drawing from the answers ========================================== */

async function drawRope(signal) {
  const seq = val("seq_len"), rope = ropeFields();
  const an = await post("/v1/analysis", {kind: "rope", seq_len: seq, points: 200, ...rope}, signal);
  const trained = an.trained_len;
  const scaled = rope.rope_scaling && rope.rope_scaling.rope_type &&
                 rope.rope_scaling.rope_type !== "default";
  const wl = values(an.wavelength), wl0 = values(an.wavelength_original);
  const series = scaled ? [{label: "unscaled", y: wl0, dash: true, colour: "#888"},
                           {label: rope.rope_scaling.rope_type, y: wl}]
                        : [{label: "wavelength", y: wl}];
  lineChart($("chart-wavelength"), {
    series, ylog: true, xlabel: "pair index k", ylabel: "wavelength 2π/θ_k (tokens)",
    marks: [{y: trained, label: `trained ${trained}`}].concat(
      seq !== trained ? [{y: seq, label: `seq_len ${seq}`}] : []),
  });
  const dist = values(an.decay_distance), bound = values(an.decay_bound);
  lineChart($("chart-decay"), {
    series: [{label: "RoFormer bound", x: dist, y: bound.map((v) => v / bound[0])},
             {label: "mean cos(rθ)", x: dist, y: values(an.decay_mean_cos)}],
    xlog: true, xlabel: "relative distance r (tokens)", ylabel: "relative to r = 0",
    marks: trained < seq ? [{x: trained, label: `trained ${trained}`}] : [],
  });
  const unseen = values(an.seen).filter((v) => !v).length;
  $("status").textContent = `rotary_dim ${an.rotary_dim}, attention factor ${fmt(an.attention_scaling)}; ` +
    `${unseen} of ${wl.length} pairs reach angles at ${seq} they never reached in ${trained} tokens`;

  /* q.k against distance from the cos table: q = k with every channel
   * alike, q at 0 and k at r, gives attention_scaling x the row's mean. */
  const n = Math.min(seq, QK_MAX);
  const rp = await post("/v1/rope", {...rope, positions: n, seq_len: seq, encoding: "b64"}, signal);
  const cos = rows(rp.cos), qk = cos.map((row) => rp.attention_scaling *
                                           row.reduce((a, b) => a + b, 0) / row.length);
  lineChart($("chart-qk"), {
    series: [{label: "q·k / |q||k|", y: qk}], xlabel: "distance r (tokens)", ylabel: "q·k",
    marks: trained < n ? [{x: trained, label: `trained ${trained}`}] : [],
  });
  await drawPlanner(seq, rope, trained, signal);
}

/* A value as JSON with a space after each comma and colon, so that a long
 * rope_scaling wraps between its members rather than inside a name. */
function spacedJson(v) {
  if (v && typeof v === "object" && !Array.isArray(v))
    return "{" + Object.entries(v).map(([k, x]) => `"${k}": ${spacedJson(x)}`).join(", ") + "}";
  return JSON.stringify(v);
}

/* A method's config fields, one per line, rope_scaling on one line. */
function configText(cfg) {
  return Object.entries(cfg).map(([k, v]) => `"${k}": ${spacedJson(v)}`).join(",\n");
}

async function drawPlanner(seq, rope, trained, signal) {
  const table = $("planner-table"), svg = $("chart-planner");
  if (seq <= trained) {
    $("planner-hint").textContent = `set a length beyond the trained ${trained} to plan an extension`;
    lineChart(svg, {series: [], empty: `seq_len ${seq} is within the trained ${trained} tokens`});
    table.textContent = "";
    return;
  }
  const base = {...rope, max_position_embeddings: trained};
  delete base.rope_scaling;
  const ex = await post("/v1/analysis", {kind: "extend", seq_len: seq, ...base}, signal);
  $("planner-hint").textContent = `${trained} → ${seq}, factor ${fmt(ex.factor)}; ` +
    "dynamic NTK meets NTK at the target and keeps the trained base below it";
  const scale = rows(ex.scale), seen = rows(ex.seen), att = values(ex.attention_factor);
  lineChart(svg, {
    /* Dynamic NTK lies on NTK at the target: dashed, so that both show. */
    series: ex.methods.map((m, i) => ({label: m, y: scale[i], dash: m === "dynamic"})), ylog: true,
    xlabel: "pair index k", ylabel: "scaled / trained frequency",
  });
  const t = document.createElement("table");
  t.innerHTML = "<thead><tr><th>method</th><th>config.json fields</th>" +
                "<th>attention factor</th><th>pairs out of their trained angles</th></tr></thead>";
  const body = document.createElement("tbody");
  ex.methods.forEach((m, i) => {
    const tr = document.createElement("tr");
    const cells = [m, configText(ex.configs[m]), fmt(att[i]),
                   `${seen[i].filter((v) => !v).length} of ${seen[i].length}`];
    cells.forEach((c, k) => {
      const td = document.createElement("td");
      if (k === 0) {
        const sw = document.createElement("span");
        sw.className = "swatch";
        sw.style.background = PALETTE[i % PALETTE.length];
        td.appendChild(sw);
      }
      if (k === 1) {
        const pre = document.createElement("pre");
        pre.textContent = c;
        td.appendChild(pre);
      } else {
        td.appendChild(document.createTextNode(c));
      }
      tr.appendChild(td);
    });
    body.appendChild(tr);
  });
  t.appendChild(body);
  table.textContent = "";
  table.appendChild(t);
}

async function drawBias(signal) {
  const fam = $("family").value, seq = val("seq_len"), H = val("num_heads");
  const head = val("head") || 0, S = Math.min(seq, BIAS_CURVE_MAX);
  const an = await post("/v1/analysis", {kind: "bias", seq_len: S, num_heads: H, encoding: "b64",
                                         ...biasFields(false, H)}, signal);
  if (an.bias) {
    const curves = rows(an.bias), ramp = curves.length > PALETTE.length;
    lineChart($("chart-bias"), {
      /* More heads than colours: head 0 dark to the last yellow. */
      series: curves.map((y, h) => ({label: `head ${h}`, y, steps: fam === "t5",
                                     colour: ramp ? `rgb(${viridis(h / (curves.length - 1))})` : undefined})),
      /* The first and the last head: the ends of the colour ramp. */
      legendPick: ramp ? [0, curves.length - 1] : undefined,
      xlog: fam === "t5", /* T5's buckets are spaced logarithmically */
      xlabel: "distance to an earlier key (tokens)", ylabel: "bias added to the score",
    });
    lineChart($("chart-reach"), {
      series: [{label: "weight ÷ 10", y: values(an.reach_10), markers: true},
               {label: "weight ÷ 100", y: values(an.reach_100), markers: true}],
      ylog: true, xlabel: "head", ylabel: "distance (tokens)", xDomain: [0, H - 1],
      empty: `no head cuts a weight by 10 within ${S} tokens`,
    });
  }
  if (fam === "t5") {
    const marks = [{x: an.saturation_distance, label: `last bucket from ${an.saturation_distance}`}];
    const series = [{label: "keys before", y: values(an.buckets), steps: true}];
    if (an.buckets_after) series.push({label: "keys after", y: values(an.buckets_after), steps: true});
    lineChart($("chart-buckets"), {series, marks, xlog: true, xlabel: "distance (tokens)",
                                   ylabel: "bucket"});
  }
  $("status").textContent = fam === "alibi"
    ? `slopes ${values(an.slopes).slice(0, 4).map(fmt).join(", ")}…; head ${head} sees ` +
      `${fmt(values(an.reach_10)[head])} tokens before a weight drops 10×`
    : fam === "t5" ? `distances from ${an.saturation_distance} on share the last bucket`
                   : `curves up to ${S} tokens`;
  const never = values(an.reach_10).map((r, h) => (Number.isFinite(r) ? -1 : h)).filter((h) => h >= 0);
  if (an.reach_10 && never.length)
    $("status").textContent += `; ${never.length === 1 ? "head" : "heads"} ${never.join(", ")} ` +
      `never cut a weight 10× within ${S} tokens`;

  /* The heatmap asks /v1/bias for the one head shown: ALiBi by its slope
   * (from the analysis), the others by their own per-head lists. */
  const n = Math.min(seq, HEATMAP_MAX), one = biasFields(true, H);
  if (fam === "alibi") {
    delete one.max_bias;
    one.slopes = [values(an.slopes)[Math.min(head, H - 1)]];
  }
  if (head >= H) throw new Problem(400, {field: "/head", detail: `head ${head} does not exist: num_heads is ${H}`});
  const bt = await post("/v1/bias", {...one, num_heads: 1, q_len: n, k_len: n,
                                     causal: val("causal"), encoding: "b64"}, signal);
  heatmap($("heatmap"), values(bt.bias), n, 0);
}

/* ==== the loop =========================================================== */

let timer = null, controller = null, generation = 0;

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(redraw, 250);
}

async function redraw() {
  if (controller) controller.abort();
  controller = new AbortController();
  const mine = ++generation, signal = controller.signal;
  document.body.dataset.busy = "1";
  clearErrors();
  $("error").textContent = "";
  $("status").textContent = "computing…";
  try {
    if ($("family").value === "rope") await drawRope(signal);
    else await drawBias(signal);
    if (mine === generation) document.body.dataset.ready = String(mine);
  } catch (err) {
    if (mine === generation) {
      if (err.name !== "AbortError") $("status").textContent = "";
      showError(err);
      document.body.dataset.failed = String(mine);
    }
  } finally {
    if (mine === generation) document.body.dataset.busy = "0";
  }
}

/* A pasted config.json: the position fields of Hugging Face's names. */
function useConfig() {
  const note = $("config-note");
  let c;
  try { c = JSON.parse($("config").value); } catch (e) { note.textContent = "not JSON: " + e.message; return; }
  const used = [], p = {};
  const take = (k, to) => { if (c[k] !== undefined && c[k] !== null) { p[to || k] = c[k]; used.push(k); } };
  const type = c.model_type || "";
  if (type === "bloom" || (c.attn_config && c.attn_config.alibi)) {
    p.family = "alibi";
    p.num_heads = c.n_head || c.num_attention_heads || (c.attn_config && c.n_heads) || c.n_heads;
    if (c.attn_config && c.attn_config.alibi_bias_max) p.max_bias = c.attn_config.alibi_bias_max;
    used.push("model_type");
  } else if (type === "t5" || c.relative_attention_num_buckets) {
    p.family = "t5";
    take("relative_attention_num_buckets");
    take("relative_attention_max_distance");
    take("num_heads");
    p.bidirectional = !c.is_decoder;
  } else {
    p.family = "rope";
    take("rope_theta");
    take("max_position_embeddings");
    take("partial_rotary_factor");
    take("rotary_pct", "partial_rotary_factor");
    if (c.head_dim) take("head_dim");
    else if (c.qk_rope_head_dim) take("qk_rope_head_dim", "head_dim");
    else if (c.hidden_size && c.num_attention_heads) {
      p.head_dim = c.hidden_size / c.num_attention_heads;
      used.push("hidden_size", "num_attention_heads");
    }
    p.rope_scaling = c.rope_scaling || null;
    if (c.rope_scaling) used.push("rope_scaling");
    if (p.max_position_embeddings) p.seq_len = p.max_position_embeddings;
  }
  setForm(p);
  note.textContent = used.length ? "read: " + used.join(", ") : "no position fields found";
  schedule();
}

function init() {
  const sel = $("preset");
  for (const name in PRESETS) {
    const o = document.createElement("option");
    o.textContent = name;
    sel.appendChild(o);
  }
  sel.addEventListener("change", () => { setForm(PRESETS[sel.value]); schedule(); });
  $("family").addEventListener("change", () => { showFamily(); schedule(); });
  for (const f of FIELDS) {
    $(f).addEventListener("input", schedule);
    $(f).addEventListener("change", schedule);
  }
  $("useconfig").addEventListener("click", useConfig);
  $("keyform").addEventListener("submit", (ev) => {
    ev.preventDefault();
    apiKey = $("apikey").value.trim();
    sessionStorage.setItem("attnbias-key", apiKey);
    $("keyform").hidden = true;
    schedule();
  });
  setForm(PRESETS[sel.value]);
  redraw();
}

document.addEventListener("DOMContentLoaded", init);
