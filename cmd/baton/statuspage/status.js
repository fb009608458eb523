// baton's status page: reads status.json (the document `baton status -o
// json` prints) every second and draws it. Every name and message from the
// document goes into the page as text (textContent), never as markup. No
// script, style or font comes from anywhere but this address.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#2f6fdb", "#d9480f", "#2b8a3e", "#ae3ec9", "#e8590c", "#0c8599", "#c2255c", "#5c940d"];
const STATE_COLORS = { starting: "#adb5bd", active: "#2b8a3e", canary: "#7048e8", draining: "#f08c00", failed: "#e03131" };

function color(id) { return COLORS[id % COLORS.length]; }

function el(tag, attrs, ...children) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function td(text, cls) { return el("td", cls ? { class: cls } : {}, text); }

function time(t) { return t ? new Date(t).toLocaleTimeString() : ""; }

function ms(n) {
  if (n === null || n === undefined) return "";
  return n < 1000 ? n + " ms" : (n / 1000).toFixed(1) + " s";
}

function fill(id, rows) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren(...rows);
}

// spans returns each generation's life as segments of a state, from the
// handoffs' times: starting until ready; active, or canary until its
// verdict; draining from when the next one took over (or it was aborted)
// until its last worker exited (the handoff's drainMs), or now.
function spans(st, now) {
  const out = [];
  const handoffs = (st.handoffs || []).slice().sort((a, b) => a.id - b.id);
  for (const g of st.generations || []) {
    const start = Date.parse(g.startedAt);
    const r = { id: g.id, state: g.state, start: start, segs: [] };
    out.push(r);
    const made = handoffs.find(h => h.to === g.id);
    const ended = handoffs.find(h => h.from === g.id && h.outcome === "ok" && !(h.canary && !h.canary.verdict));
    if (g.state === "failed" || (made && made.outcome === "failed")) {
      r.segs.push({ state: "failed", from: start, to: made ? Date.parse(made.startedAt) + made.durationMs : start + 1000 });
      continue;
    }
    const ready = made && made.readyMs ? Date.parse(made.startedAt) + made.readyMs : start;
    r.segs.push({ state: "starting", from: start, to: g.state === "starting" ? now : ready });
    if (g.state === "starting") continue;
    let from = ready;
    if (made && made.canary) {
      const decided = made.canary.decidedAt ? Date.parse(made.canary.decidedAt) : now;
      r.segs.push({ state: "canary", from: from, to: decided });
      from = decided;
      if (made.canary.verdict === "aborted") {
        r.segs.push({ state: "draining", from: decided, to: made.drainMs != null ? decided + made.drainMs : (g.state === "exited" ? decided : now) });
        continue;
      }
      if (!made.canary.verdict) continue;
    }
    let drain = null, drained = null;
    if (ended) {
      drain = ended.canary && ended.canary.decidedAt ? Date.parse(ended.canary.decidedAt) : Date.parse(ended.startedAt) + ended.readyMs;
      if (ended.drainMs != null) drained = drain + ended.drainMs;
    } else if (g.state === "draining" || g.state === "exited") {
      drain = now; // drained by a stop, or its handoff is no longer listed
    }
    if (drain === null) {
      r.segs.push({ state: "active", from: from, to: now });
      continue;
    }
    r.segs.push({ state: "active", from: from, to: drain });
    r.segs.push({ state: "draining", from: drain, to: drained !== null ? drained : (g.state === "exited" ? drain : now) });
  }
  return out.sort((a, b) => a.id - b.id);
}

function drawTimeline(st, now) {
  const rows = spans(st, now);
  const W = 900, left = 90, rowH = 22, top = 20;
  const from = Math.min(now - 60000, ...rows.map(r => r.start).filter(Number.isFinite));
  const span = Math.max(now - from, 1000);
  const x = t => left + (Math.max(t, from) - from) / span * (W - left - 10);
  const svg = el("svg:svg", { width: W, height: top + rows.length * rowH + 24, role: "img", "aria-label": "generations over time" });
  svg.append(el("svg:text", { x: left, y: 12 }, time(from)), el("svg:text", { x: W - 10, y: 12, "text-anchor": "end" }, time(now)));
  rows.forEach((r, i) => {
    const y = top + i * rowH;
    const g = el("svg:g", { "data-generation": r.id, "data-state": r.state, class: "generation" });
    g.append(el("svg:text", { x: 0, y: y + 14 }, "gen " + r.id + " " + r.state));
    for (const s of r.segs) {
      if (!(s.to > s.from) && s.state !== "starting") continue;
      const w = Math.max(x(s.to) - x(s.from), 2);
      const rect = el("svg:rect", { x: x(s.from), y: y + 3, width: w, height: rowH - 8, fill: STATE_COLORS[s.state] || "#999", "data-segment": s.state });
      rect.append(el("svg:title", {}, "generation " + r.id + ": " + s.state + " from " + time(s.from) + " for " + ms(Math.round(s.to - s.from))));
      g.append(rect);
    }
    svg.append(g);
  });
  const legend = el("svg:g", {});
  let lx = left;
  for (const [state, c] of Object.entries(STATE_COLORS)) {
    legend.append(el("svg:rect", { x: lx, y: top + rows.length * rowH + 8, width: 10, height: 10, fill: c }),
      el("svg:text", { x: lx + 14, y: top + rows.length * rowH + 17 }, state));
    lx += 90;
  }
  svg.append(legend);
  document.getElementById("timeline").replaceChildren(svg);
}

function drawChart(st) {
  const samples = st.timeline || [];
  const box = document.getElementById("chart");
  if (samples.length < 2) {
    box.replaceChildren(el("p", { class: "note" }, "connections: not enough samples yet"));
    return;
  }
  const W = 900, H = 180, left = 50, bottom = 20;
  const t0 = Date.parse(samples[0].at), t1 = Date.parse(samples[samples.length - 1].at);
  let max = 1;
  const ids = new Set();
  for (const s of samples) {
    for (const [id, n] of Object.entries(s.connections)) {
      ids.add(Number(id));
      max = Math.max(max, n);
    }
  }
  const x = t => left + (t - t0) / Math.max(t1 - t0, 1) * (W - left - 10);
  const y = n => H - bottom - n / max * (H - bottom - 10);
  const svg = el("svg:svg", { width: W, height: H + 20, role: "img", "aria-label": "connections per generation" });
  svg.append(el("svg:line", { x1: left, y1: H - bottom, x2: W - 10, y2: H - bottom, stroke: "#999" }),
    el("svg:text", { x: left - 6, y: y(max) + 4, "text-anchor": "end" }, max),
    el("svg:text", { x: left - 6, y: H - bottom + 4, "text-anchor": "end" }, 0),
    el("svg:text", { x: left, y: H + 2 }, time(t0)),
    el("svg:text", { x: W - 10, y: H + 2, "text-anchor": "end" }, time(t1)));
  let lx = left;
  for (const id of [...ids].sort((a, b) => a - b)) {
    const pts = [];
    for (const s of samples) {
      if (id in s.connections) pts.push(x(Date.parse(s.at)).toFixed(1) + "," + y(s.connections[id]).toFixed(1));
    }
    svg.append(el("svg:polyline", { points: pts.join(" "), fill: "none", stroke: color(id), "stroke-width": 2, "data-generation": id }));
    svg.append(el("svg:rect", { x: lx, y: H + 8, width: 10, height: 10, fill: color(id) }), el("svg:text", { x: lx + 14, y: H + 17 }, "gen " + id));
    lx += 70;
  }
  svg.setAttribute("height", H + 24);
  box.replaceChildren(el("p", { class: "note" }, "client connections per generation"), svg);
}

function render(st) {
  const now = Date.now();
  const pending = st.pendingHandoff ? "; a handoff is under way" : "";
  document.getElementById("summary").textContent =
    "pid " + st.pid + (st.version ? ", " + st.version : "") + ", up since " + new Date(st.startedAt).toLocaleString() +
    "; active generation " + st.activeGeneration + (st.ready ? ", ready" : ", not ready") + (st.stopping ? ", stopping" : "") + pending +
    "; " + st.totals.connections + " connections, " + st.totals.requests + " requests, " + st.totals.errors + " errors";
  drawTimeline(st, now);
  drawChart(st);

  const canary = document.getElementById("canary");
  canary.hidden = !st.canary;
  if (st.canary) {
    const c = st.canary;
    const ratio = (f, r) => r ? (100 * f / r).toFixed(2) + "%" : "–";
    document.getElementById("canary-body").replaceChildren(
      el("p", {}, "generation " + c.generation + " takes " + (100 * c.share).toFixed(1) + "% of new connections (" + c.percent + "% asked; steering: " + c.steering + ")"),
      el("p", {}, "errors: canary " + ratio(c.failures, c.requests) + " of " + c.requests + " requests; active generation " + c.activeGeneration + " " + ratio(c.activeFailures, c.activeRequests) + " of " + c.activeRequests),
      el("p", {}, c.autoVerdictInMs === null ? "an operator decides: baton promote or baton abort" : "automatic verdict in " + ms(c.autoVerdictInMs)));
  }

  const gens = [];
  for (const g of st.generations || []) {
    const workers = g.workers && g.workers.length ? g.workers : [null];
    workers.forEach((w, i) => {
      const tr = el("tr", { "data-generation": g.id, "data-state": g.state });
      tr.append(td(i === 0 ? g.id : ""), td(i === 0 ? g.state : "", "state-" + g.state), td(i === 0 ? time(g.startedAt) : ""));
      if (w) {
        tr.append(td(w.slot), td(w.pid), td(w.state + (w.waiting ? " (" + w.waiting + ")" : "")), td(w.connections, "num"), td(w.requests, "num"), td(w.errors, "num"));
      } else {
        tr.append(td(""), td(""), td(g.reason || ""), td(""), td(""), td(""));
      }
      gens.push(tr);
    });
  }
  fill("generations", gens);

  fill("handoffs", (st.handoffs || []).slice().reverse().slice(0, 20).map(h => el("tr", {},
    td(h.id), td(h.from + " → " + h.to), td(h.trigger + (h.canary ? " (canary " + h.canary.percent + "%)" : "")), td(h.outcome, "state-" + (h.outcome === "ok" ? "active" : "failed")),
    td(time(h.startedAt)), td(ms(h.readyMs)), td(ms(h.drainMs)), td(h.reason || ""))));

  fill("listeners", (st.listeners || []).map(l => el("tr", {},
    td(l.name), td(l.address), td(l.protocol || ""), td(l.sockets, "num"), td((l.acceptQueue || []).join(" ") + (l.backlog ? " / " + l.backlog : "")), td(l.steering || ""))));

  const counters = (st.totals && st.totals.backends) || {};
  const seen = new Set();
  const rows = [];
  for (const b of st.backends || []) {
    seen.add(b.name);
    const c = counters[b.name] || {};
    rows.push(el("tr", {}, td(b.name), td(b.mode), td(b.ready, "num"), td(b.terminating, "num"), td(c.requests || 0, "num"), td(c.errors || 0, "num"), td(c.retries || 0, "num"), td(c.connectFailures || 0, "num"), td(b.error || "")));
  }
  for (const [name, c] of Object.entries(counters)) {
    if (!seen.has(name)) rows.push(el("tr", {}, td(name), td(""), td(""), td(""), td(c.requests, "num"), td(c.errors, "num"), td(c.retries, "num"), td(c.connectFailures, "num"), td("")));
  }
  fill("backends", rows);
}

async function refresh() {
  const error = document.getElementById("error");
  try {
    const resp = await fetch("status.json", { cache: "no-store" });
    if (!resp.ok) throw new Error("status.json: HTTP " + resp.status);
    render(await resp.json());
    error.hidden = true;
    document.body.dataset.loaded = "true";
  } catch (e) {
    error.textContent = "baton does not answer: " + e.message;
    error.hidden = false;
  }
}

refresh();
setInterval(refresh, 1000);
