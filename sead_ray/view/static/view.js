// sead-ray view: the router, DOM and chart helpers, the run page and the curriculum map.
// Every text from a file (dialogues are model output) goes into the page as text nodes, never as HTML.
"use strict";
const SV = { pages: {}, folder: null, timer: null };

SV.h = function (tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : String(c));
  return el;
};
SV.s = function (tag, attrs, ...children) {   // SVG
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) el.setAttribute(k, v);
  for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : String(c));
  return el;
};
SV.put = (el, ...kids) =>   // replace an element's children; nulls (optional parts) are left out, arrays flattened
  el.replaceChildren(...kids.flat(Infinity).filter((k) => k !== null && k !== undefined && k !== false));
SV.api = async function (url, body) {
  const opts = body === undefined ? {} : { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  const r = await fetch(url, opts);
  let data = null;
  try { data = await r.json(); } catch (e) { data = { error: `HTTP ${r.status}` }; }
  if (!r.ok) throw new Error(data && data.error ? data.error : `HTTP ${r.status}`);
  return data;
};
SV.q = (params) => Object.entries(params).filter(([, v]) => v !== "" && v !== null && v !== undefined)
  .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join("&");
SV.link = (page, params) => `#/${page}` + (Object.keys(params || {}).length ? "?" + SV.q(params) : "");
SV.fmt = (v, d = 2) => (typeof v === "number" && isFinite(v)) ? v.toFixed(d) : "–";
SV.error = (msg) => SV.h("div", { class: "error", "data-testid": "error" }, msg);
SV.badge = (text, cls) => SV.h("span", { class: `badge ${cls || text}` }, text);
SV.select = function (label, name, options, value, onchange) {
  const sel = SV.h("select", { name, onchange: (e) => onchange(e.target.value) },
    options.map(([v, t]) => SV.h("option", { value: v, selected: String(v) === String(value ?? "") ? "selected" : null }, t)));
  return SV.h("label", {}, label, sel);
};
SV.sourceLabel = (rel) => rel === "" ? "(this folder)" : rel;

// ---------------------------------------------------------------------------- charts (inline SVG)
// series: [{name, color, points: [{x, y, lo, hi}], dash, marker}]
SV.chart = function ({ series, width = 560, height = 240, ymin, ymax, xlabel = "iteration", title }) {
  const pad = { l: 42, r: 12, t: title ? 22 : 10, b: 34 };
  const pts = series.flatMap((s) => s.points).filter((p) => typeof p.y === "number");
  const xs = series.flatMap((s) => s.points.map((p) => p.x));
  const x0 = Math.min(...xs, 0), x1 = Math.max(...xs, 1);
  let y0 = ymin ?? Math.min(...pts.map((p) => p.lo ?? p.y), 0), y1 = ymax ?? Math.max(...pts.map((p) => p.hi ?? p.y), 1e-9);
  if (!(y1 - y0 > 1e-12)) y1 = y0 + 1;
  const X = (x) => pad.l + (x - x0) / (x1 - x0 || 1) * (width - pad.l - pad.r);
  const Y = (y) => height - pad.b - (y - y0) / (y1 - y0) * (height - pad.t - pad.b);
  const svg = SV.s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  if (title) svg.append(SV.s("text", { x: pad.l, y: 14, "font-weight": 600 }, title));
  for (let i = 0; i <= 4; i++) {
    const v = y0 + (y1 - y0) * i / 4;
    svg.append(SV.s("line", { x1: pad.l, x2: width - pad.r, y1: Y(v), y2: Y(v), stroke: "#e4e8ef" }),
      SV.s("text", { x: pad.l - 4, y: Y(v) + 4, "text-anchor": "end" }, Math.abs(v) < 1e-3 && v !== 0 ? v.toExponential(0) : +v.toFixed(2)));
  }
  const step = Math.max(1, Math.ceil((x1 - x0) / 12));
  for (let x = Math.ceil(x0); x <= x1; x += step)
    svg.append(SV.s("text", { x: X(x), y: height - pad.b + 14, "text-anchor": "middle" }, x));
  svg.append(SV.s("text", { x: (pad.l + width - pad.r) / 2, y: height - 4, "text-anchor": "middle" }, xlabel));
  let ly = pad.t + 4;
  for (const s of series) {
    const good = s.points.filter((p) => typeof p.y === "number");
    for (const p of good) if (typeof p.lo === "number")
      svg.append(SV.s("line", { x1: X(p.x), x2: X(p.x), y1: Y(p.lo), y2: Y(p.hi), stroke: s.color, "stroke-width": 1.5 }),
        SV.s("line", { x1: X(p.x) - 4, x2: X(p.x) + 4, y1: Y(p.lo), y2: Y(p.lo), stroke: s.color }),
        SV.s("line", { x1: X(p.x) - 4, x2: X(p.x) + 4, y1: Y(p.hi), y2: Y(p.hi), stroke: s.color }));
    if (good.length > 1 && !s.noline)
      svg.append(SV.s("polyline", { points: good.map((p) => `${X(p.x)},${Y(p.y)}`).join(" "), fill: "none", stroke: s.color,
        "stroke-width": 2, "stroke-dasharray": s.dash || null }));
    for (const p of good) svg.append(s.marker === "diamond"
      ? SV.s("rect", { x: X(p.x) - 4, y: Y(p.y) - 4, width: 8, height: 8, fill: s.color, transform: `rotate(45 ${X(p.x)} ${Y(p.y)})` })
      : SV.s("circle", { cx: X(p.x), cy: Y(p.y), r: 3.5, fill: s.color }));
    svg.append(SV.s("rect", { x: width - pad.r - 150, y: ly - 8, width: 10, height: 10, fill: s.color }),
      SV.s("text", { x: width - pad.r - 136, y: ly + 1 }, s.name));
    ly += 14;
  }
  return svg;
};

// ---------------------------------------------------------------------------- router
SV.route = function () {
  const hash = location.hash.replace(/^#\/?/, "");
  const [page, query] = hash.split("?");
  const params = Object.fromEntries(new URLSearchParams(query || ""));
  return { page: page || "run", params };
};
SV.go = (page, params) => { location.hash = SV.link(page, params); };
SV.render = async function () {
  if (SV.timer) { clearInterval(SV.timer); SV.timer = null; }
  const { page, params } = SV.route();
  document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("active", a.dataset.page === page));
  const main = document.getElementById("main");
  SV.put(main, SV.h("p", { class: "muted" }, "loading…"));
  try {
    if (!SV.folder) SV.folder = await SV.api("/api/folder");
    document.getElementById("root").textContent = SV.folder.root;
    const fn = SV.pages[page];
    if (!fn) throw new Error(`no page ${page}`);
    await fn(main, params);
  } catch (e) {
    SV.put(main, SV.error(e.message));
  }
};
SV.start = function () { window.addEventListener("hashchange", SV.render); SV.render(); };
SV.defaultRun = (params) => params.path ?? params.run ?? (SV.folder.runs.length ? SV.folder.runs[0] : null);
SV.runPicker = function (page, current, key = "path") {
  if (SV.folder.runs.length < 2) return null;
  return SV.select("run", "run", SV.folder.runs.map((r) => [r, SV.sourceLabel(r)]), current, (v) => SV.go(page, { [key]: v }));
};

// ---------------------------------------------------------------------------- run page
SV.pages.run = async function (main, params) {
  const path = SV.defaultRun(params);
  if (path === null) {
    SV.put(main, SV.h("h2", {}, "No training run here"),
      SV.h("p", {}, "This folder holds comparisons or evaluations: see ", SV.h("a", { href: "#/compare" }, "Compare"),
        " and ", SV.h("a", { href: "#/dialogues" }, "Dialogues"), "."));
    return;
  }
  let version = null;
  const draw = async () => {
    const run = await SV.api(`/api/run?${SV.q({ path })}`);
    if (run.version === version) return;
    version = run.version;
    SV.put(main, ...SV.runView(run, path).filter((x) => x !== null));
  };
  await draw();
  SV.timer = setInterval(() => draw().catch(() => {}), 3000);   // live while the run writes
};
SV.runView = function (run, path) {
  const h = SV.h, s = run.series;
  const out = [h("h2", {}, `Run ${SV.sourceLabel(path)}`), SV.runPicker("run", path)];
  out.push(h("p", { class: "muted" }, `latest checkpoint: ${run.checkpoint || "none yet"} · `,
    h("a", { href: SV.link("curriculum", { run: path }) }, "curriculum map"), " · ",
    h("a", { href: SV.link("dialogues", { file: run.dialogue_files.filter((f) => f.includes("iter_")).pop() || run.dialogue_files[0] || "" }) }, "dialogues"),
    ` · updated ${new Date().toLocaleTimeString()} (follows the run while it writes)`));
  if (run.config_problem) out.push(h("div", { class: "warn" }, run.config_problem));
  const p = run.problems;
  if (p && (p.torn || p.malformed)) out.push(h("div", { class: "warn", "data-testid": "torn" },
    `metrics.jsonl: ${p.torn} torn line(s) skipped (lines ${p.torn_lines.join(", ")}), ${p.malformed} malformed`));
  if (!s.length) { out.push(h("p", {}, "No finished training iteration yet.")); return out; }
  out.push(h("div", { class: "card" }, h("h3", {}, "Learning verdict (held-out cold calls; as report/summary.md)"),
    run.verdict ? h("pre", { class: "verdict", "data-testid": "verdict" }, run.verdict)
      : h("p", { class: "muted", "data-testid": "verdict" }, "No two held-out evaluations yet (train.eval_every): the verdict compares the first, after the warm start, with the last, owner by owner."),
    run.training_verdict ? h("pre", { class: "muted", "data-testid": "training-verdict" }, run.training_verdict) : null));
  if (run.made_up && run.made_up.length) out.push(h("div", { class: "card", "data-testid": "made-up" },
    h("h3", {}, "What the agent made up: sentences of won calls that are not the scenario's"),
    ...run.made_up.map((m) => h("div", {}, h("p", {}, `${m.file}: ${m.total} sentence(s), said ${m.said} time(s)`),
      m.sentences.length ? h("ul", {}, ...m.sentences.map((x) => h("li", {}, `${x.said} × “${x.sentence}” `,
        h("span", { class: "muted" }, `(nearest: “${x.nearest}”, ${x.similarity.toFixed(2)})`)))) : null))));
  const cr = { name: "CR, training calls (95 % CI)", color: "#1f5fbf", points: s.map((r) => ({ x: r.iteration, y: r.n ? r.k / r.n : null, lo: r.low, hi: r.high })) };
  const held = { name: "CR, held-out (greedy)", color: "#d9480f", marker: "diamond", dash: "4 3",   // nudged right: both bars readable
    points: run.held_out.map((r) => ({ x: r.iteration + 0.06, y: r.n ? r.k / r.n : null, lo: r.low, hi: r.high })) };
  const reward = { name: "mean reward", color: "#2b8a3e", dash: "2 3", points: s.map((r) => ({ x: r.iteration, y: r.reward_mean })) };
  const loss = { name: "GRPO loss", color: "#7048e8", points: s.map((r) => ({ x: r.iteration, y: r.train_loss })) };
  const kl = { name: "KL", color: "#e67700", dash: "4 3", points: s.map((r) => ({ x: r.iteration, y: r.train_kl })) };
  out.push(h("div", { class: "row" },
    h("div", { class: "card", "data-testid": "cr-chart" }, SV.chart({ series: [cr, held, reward], ymin: 0, ymax: 1, title: "completion rate and reward" })),
    h("div", { class: "card" }, SV.chart({ series: [loss, kl], title: "policy update" }))));
  const heldBy = Object.fromEntries(run.held_out.map((r) => [r.iteration, r]));
  const rows = s.map((r) => h("tr", { "data-iteration": r.iteration },
    h("td", { class: "num" }, r.iteration),
    h("td", { class: "num", "data-testid": "cr", "data-cr": r.cr, "data-k": r.k, "data-n": r.n }, `${SV.fmt(r.cr)} (${r.k}/${r.n})`),
    h("td", { class: "num" }, `[${SV.fmt(r.low)}, ${SV.fmt(r.high)}]`),
    h("td", { class: "num" }, heldBy[r.iteration] ? heldBy[r.iteration].text : "–"),
    h("td", { class: "num" }, SV.fmt(r.reward_mean, 3)), h("td", { class: "num" }, SV.fmt(r.train_loss, 4)),
    h("td", { class: "num" }, typeof r.train_kl === "number" ? r.train_kl.toExponential(2) : "–"),
    h("td", {}, h("a", { href: SV.link("curriculum", { run: path, iteration: r.iteration }) }, "map"), " ",
      h("a", { href: SV.link("dialogues", { file: run.dialogue_files.find((f) => f.endsWith(`iter_${String(r.iteration).padStart(4, "0")}.jsonl`)) || "" }) }, "calls"))));
  out.push(h("h3", {}, "Per iteration"), h("table", { "data-testid": "iterations" },
    h("tr", {}, ["iter", "CR (k/n)", "95 % CI", "held-out after it", "reward", "loss", "KL", ""].map((t) => h("th", {}, t))), rows));
  if (run.held_out.length && !heldBy[run.held_out[0].iteration])
    out.push(h("p", { class: "muted" }, `held-out before training: ${run.held_out[0].text}`));
  // curriculum.depth: reverse: where calls started (dK: the policy took over K turns before the honest script's ask)
  const order = (k) => (k === "cold" ? Infinity : Number(k.slice(1)));
  const trained = s.filter((r) => r.cr_by_start), held2 = run.held_out_by_start || {};
  const starts = [...new Set([...trained.flatMap((r) => Object.keys(r.cr_by_start)),
    ...Object.values(held2).flatMap((x) => Object.keys(x))])].sort((a, b) => order(a) - order(b));
  if (starts.length) {
    const its = [...new Set([...trained.map((r) => r.iteration), ...Object.keys(held2).map(Number)])].sort((a, b) => a - b);
    const byIt = Object.fromEntries(trained.map((r) => [r.iteration, r.cr_by_start]));
    out.push(h("h3", {}, "By start (dK: the agent takes over K turns before the honest script's ask; cold: the whole call)"),
      h("table", { "data-testid": "by-start" },
        h("tr", {}, ["iter", ...starts.map((x) => `training ${x}`), ...starts.map((x) => `held-out ${x}`)].map((t) => h("th", {}, t))),
        its.map((it) => h("tr", {}, h("td", { class: "num" }, it),
          starts.map((x) => h("td", { class: "num" }, byIt[it] && byIt[it][x] ? `${SV.fmt(byIt[it][x].cr)} (${byIt[it][x].n})` : "–")),
          starts.map((x) => h("td", { class: "num" }, (held2[it] || {})[x] || "–"))))));
  }
  return out;
};

// ---------------------------------------------------------------------------- curriculum map
SV.color = (v, metric) => {   // red (0) -> yellow -> green (1); weight: white -> blue
  if (typeof v !== "number") return "#f3f4f6";
  if (metric === "weight") return `rgb(${Math.round(255 - 180 * v)},${Math.round(255 - 120 * v)},255)`;
  const r = v < 0.5 ? 230 : Math.round(230 - (v - 0.5) * 2 * 170), g = v < 0.5 ? Math.round(90 + v * 2 * 130) : 210;
  return `rgb(${r},${g},90)`;
};
SV.pages.curriculum = async function (main, params) {
  const run = SV.defaultRun(params);
  if (run === null) throw new Error("no training run in this folder: the curriculum map is a run's");
  const info = await SV.api(`/api/run?${SV.q({ path: run })}`);
  if (!info.curriculum.length) { SV.put(main, SV.h("p", {}, "No curriculum file yet (curriculum/iter_NNNN.json).")); return; }
  const iteration = Number(params.iteration || info.curriculum[info.curriculum.length - 1]);
  const metric = params.color || "cr";
  const cur = await SV.api(`/api/curriculum?${SV.q({ run, iteration })}`);
  const h = SV.h, dims = cur.dimensions;
  const go = (over) => SV.go("curriculum", { run, iteration, color: metric, ...over });
  const list = h("div", { "data-testid": "cell-calls" }, h("p", { class: "muted" }, "Click a cell to list the calls of this iteration that started in that state."));
  const rowsDim = 0, colsDim = dims.length - 1, panelDims = dims.slice(1, -1).map((_, i) => i + 1);
  const panelKeys = panelDims.reduce((acc, d) => acc.flatMap((k) => dims[d].levels.map((_, l) => [...k, [d, l]])), [[]]);
  const panels = panelKeys.map((fixed) => {
    const title = fixed.length ? fixed.map(([d, l]) => `${dims[d].name} = ${l} (${dims[d].levels[l]})`).join(", ") : "";
    const trs = [];
    for (let r = dims[rowsDim].levels.length - 1; r >= 0; r--) {
      const tds = [h("th", {}, r)];
      for (let c = 0; c < dims[colsDim].levels.length; c++) {
        const state = dims.map((_, d) => d === rowsDim ? r : d === colsDim ? c : fixed.find(([fd]) => fd === d)[1]);
        const key = state.join("-"), e = cur.states[key];
        const value = e ? (metric === "weight" ? e.weight : e.cr) : null;
        const tried = e && (metric === "weight" || e.attempts > 0);
        const td = h("td", { class: tried ? "" : "empty", "data-state": key, style: `background:${SV.color(value, metric)}`,
          title: e ? `${key}: CR ${SV.fmt(e.cr)} (${e.successes}/${e.attempts}), band ${e.band}, weight ${SV.fmt(e.weight)}` : `${key}: never drawn` },
          tried ? (metric === "weight" ? SV.fmt(e.weight) : `${e.successes}/${e.attempts}`) : "");
        if (tried) td.addEventListener("click", () => SV.cellCalls(list, cur, key, td));
        tds.push(td);
      }
      trs.push(h("tr", {}, tds));
    }
    trs.push(h("tr", {}, h("th", {}, ""), dims[colsDim].levels.map((_, c) => h("th", {}, c))));
    return h("div", { class: "grid-panel" }, h("div", { class: "muted" }, title), h("table", {}, trs));
  });
  SV.put(main, h("h2", {}, `Curriculum map of ${SV.sourceLabel(run)} after iteration ${iteration}`),
    h("div", { class: "controls" }, SV.runPicker("curriculum", run, "run"),
      SV.select("iteration", "iteration", info.curriculum.map((i) => [i, i]), iteration, (v) => go({ iteration: v })),
      SV.select("colour by", "color", [["cr", "completion rate (cumulative)"], ["weight", "sampling weight (next draw)"]], metric, (v) => go({ color: v }))),
    h("p", { class: "muted" }, `rows: ${dims[rowsDim].name} (0 at the bottom), columns: ${dims[colsDim].name}` +
      (panelDims.length ? `, one panel per ${panelDims.map((d) => dims[d].name).join(" × ")} level` : "") +
      ". Cells show successes/attempts (or the weight); grey: no call yet."),
    h("div", { class: "legend" }, [0, 0.25, 0.5, 0.75, 1].map((v) => h("span", { style: `background:${SV.color(v, metric)}`, title: v })), " 0 → 1"),
    h("div", {}, panels), list);
};
SV.cellCalls = async function (list, cur, key, td) {
  document.querySelectorAll(".grid-panel td.sel").forEach((x) => x.classList.remove("sel"));
  td.classList.add("sel");
  const e = cur.states[key], h = SV.h;
  const head = h("h3", {}, `State ${key}: CR ${SV.fmt(e.cr)} (${e.successes}/${e.attempts} so far), band ${e.band}, weight ${SV.fmt(e.weight)}`);
  if (!cur.dialogues) { SV.put(list, head, h("p", {}, "No dialogues file for this iteration.")); return; }
  const d = await SV.api(`/api/dialogues?${SV.q({ file: cur.dialogues, state: key, limit: 200 })}`);
  SV.put(list, head, d.rows.length ? SV.callTable(d) : h("p", { class: "muted" }, `No call of iteration ${cur.iteration} started in ${key}.`),
    h("p", {}, h("a", { href: SV.link("dialogues", { file: cur.dialogues, state: key }) }, "open in the dialogue browser")));
};
