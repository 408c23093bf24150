// sead-ray view: the dialogue browser (filters, pages of calls) and one call as a chat with the callee's
// hidden state against the agent's estimate.
"use strict";
SV.FILTERS = ["outcome", "end_reason", "band", "user_set", "behavior", "format", "error", "state", "profile"];

SV.callTable = function (d) {
  const h = SV.h;
  const head = ["#", "call", "initial state", "user set", "behaviours", "outcome", "end", "turns", "tokens", "reward", "format failures"]
    .concat(d.bands ? ["band"] : []);
  return h("table", { "data-testid": "calls" }, h("tr", {}, head.map((t) => h("th", {}, t))),
    d.rows.map((r) => h("tr", { class: "clickable", "data-index": r.index, "data-outcome": r.outcome,
      onclick: () => SV.go("call", { file: d.file, index: r.index }) },
      h("td", { class: "num" }, r.index), h("td", {}, h("a", { href: SV.link("call", { file: d.file, index: r.index }) }, r.id || `#${r.index}`)),
      h("td", {}, r.state || "–"), h("td", {}, r.user_set || "–"), h("td", {}, r.behaviors.join("; ")),
      h("td", {}, SV.badge(r.outcome || "?")), h("td", {}, r.end_reason, r.error ? SV.badge("error") : null),
      h("td", { class: "num" }, r.turns), h("td", { class: "num" }, r.tokens ?? "–"), h("td", { class: "num" }, SV.fmt(r.reward)),
      h("td", { class: "num" }, r.format_failures ? SV.badge(String(r.format_failures), "fmt") : "0"),
      d.bands ? h("td", {}, r.band || "–") : null)));
};

// The simulator's agenda after a turn (`user_agenda`; records before it was typed kept counts in user_heard[0]).
function agendaText(t) {
  const a = t.user_agenda, old = t.user_heard[0].agenda;
  if (!a && !old) return "";
  const resolved = a ? a.concerns.filter((c) => a.resolved.includes(c)).length : old.resolved;
  const concerns = a ? a.concerns.length : old.concerns;
  const x = a || old;
  return ` · its agenda: ${x.identified ? "knows who calls" : "caller unknown"}, ${x.offered ? "offer named" : "no offer yet"}, ` +
    `concerns resolved ${resolved}/${concerns}`;
}

SV.problemsNote = function (name, p) {
  if (!p || !(p.torn || p.malformed || p.incomplete_last_line)) return null;
  const parts = [];
  if (p.torn) parts.push(`${p.torn} torn line(s) skipped (line ${p.torn_lines.join(", ")})`);
  if (p.malformed) parts.push(`${p.malformed} line(s) that are not dialogue records (line ${p.malformed_lines.join(", ")})`);
  if (p.incomplete_last_line) parts.push("the last line is incomplete (being written, or torn)");
  return SV.h("div", { class: "warn", "data-testid": "torn" }, `${name}: ${parts.join("; ")}`);
};

SV.allDialogueFiles = function () {
  const out = [];
  for (const [src, files] of Object.entries(SV.folder.dialogue_files)) for (const f of files) out.push([f, f]);
  for (const f of SV.folder.talks) out.push([f, f]);
  return out;
};

SV.pages.dialogues = async function (main, params) {
  const files = SV.allDialogueFiles();
  const file = params.file || (files.find(([f]) => f.includes("iter_")) || files[0] || [null])[0];
  if (!file) { SV.put(main, SV.h("p", {}, "No dialogues file in this folder.")); return; }
  const filters = Object.fromEntries(SV.FILTERS.map((k) => [k, params[k] || ""]));
  const offset = Number(params.offset || 0), limit = 50;
  const d = await SV.api(`/api/dialogues?${SV.q({ file, ...filters, offset, limit })}`);
  const h = SV.h, f = d.facets;
  const go = (over) => SV.go("dialogues", { file, ...filters, ...over, offset: over.offset ?? 0 });
  const controls = h("div", { class: "controls", "data-testid": "filters" },
    SV.select("iteration / file", "file", files.some(([x]) => x === file) ? files : [[file, file], ...files], file,
      (v) => SV.go("dialogues", { file: v, ...filters })),
    SV.select("outcome", "outcome", [["", "any"], ["success", "success"], ["failure", "failure"]], filters.outcome, (v) => go({ outcome: v })),
    SV.select("end", "end_reason", [["", "any"], ...f.end_reason.map((x) => [x, x])], filters.end_reason, (v) => go({ end_reason: v })),
    d.bands ? SV.select("band (when drawn)", "band", [["", "any"], ...f.band.map((x) => [x, x])], filters.band, (v) => go({ band: v })) : null,
    SV.select("user set", "user_set", [["", "any"], ...f.user_set.map((x) => [x, x || "(none)"])], filters.user_set, (v) => go({ user_set: v })),
    SV.select("behaviour", "behavior", [["", "any"], ...f.behavior.map((x) => [x, x])], filters.behavior, (v) => go({ behavior: v })),
    SV.select("format failure", "format", [["", "any"], ["yes", "yes"], ["no", "no"]], filters.format, (v) => go({ format: v })),
    SV.select("error", "error", [["", "any"], ["yes", "yes"], ["no", "no"]], filters.error, (v) => go({ error: v })),
    filters.state ? h("label", {}, "initial state", h("span", {}, filters.state, " ", h("a", { href: "#", onclick: (e) => { e.preventDefault(); go({ state: "" }); } }, "×"))) : null,
    filters.profile ? h("label", {}, "profile", h("span", {}, "one profile ", h("a", { href: "#", onclick: (e) => { e.preventDefault(); go({ profile: "" }); } }, "×"))) : null);
  const pager = h("div", { class: "pager", "data-testid": "pager" },
    h("button", { class: "secondary", disabled: offset === 0 ? "disabled" : null, onclick: () => go({ offset: Math.max(0, offset - limit) }) }, "‹ previous"),
    h("span", { "data-testid": "matched" }, d.matched ? `calls ${offset + 1}–${Math.min(offset + limit, d.matched)} of ${d.matched} matching (${d.total} in the file)` : `no call of ${d.total} matches`),
    h("button", { class: "secondary", disabled: offset + limit >= d.matched ? "disabled" : null, onclick: () => go({ offset: offset + limit }) }, "next ›"));
  SV.put(main, h("h2", {}, "Dialogues"), controls, SV.problemsNote(file, d.problems), pager,
    d.rows.length ? SV.callTable(d) : null);
};

// ---------------------------------------------------------------------------- one call
SV.stateSeries = function (rec, dims) {   // hidden state after each turn (0: the profile's) and the estimate of each turn
  return dims.map((dim) => ({
    dim, hidden: [{ x: 0, y: rec.profile[dim.name] }].concat(rec.turns.map((t, i) => ({ x: i + 1, y: t.user_state ? t.user_state[dim.name] : null }))),
    estimate: rec.turns.map((t, i) => ({ x: i + 1, y: t.agent_estimate ? t.agent_estimate[dim.name] : null })),
  }));
};
SV.turnChart = function (dims, before, estimate, after) {   // one row per dimension: scale, ○ before, ● after, ◆ estimate
  const w = 270, rowH = 22, svg = SV.s("svg", { width: w, height: dims.length * rowH + 16, class: "turn-chart" });
  const X = (v, max) => 78 + v / Math.max(1, max) * (w - 92);
  dims.forEach((d, i) => {
    const y = 12 + i * rowH;
    svg.append(SV.s("text", { x: 0, y: y + 4 }, d.name), SV.s("line", { x1: X(0, d.max), x2: X(d.max, d.max), y1: y, y2: y, stroke: "#c8ced9" }));
    for (let l = 0; l <= d.max; l++) svg.append(SV.s("line", { x1: X(l, d.max), x2: X(l, d.max), y1: y - 3, y2: y + 3, stroke: "#c8ced9" }));
    if (before && typeof before[d.name] === "number")
      svg.append(SV.s("circle", { cx: X(before[d.name], d.max), cy: y, r: 5, fill: "none", stroke: "#2b8a3e", "stroke-width": 1.5 }));
    if (after && typeof after[d.name] === "number") svg.append(SV.s("circle", { cx: X(after[d.name], d.max), cy: y, r: 3.5, fill: "#2b8a3e" }));
    if (estimate && typeof estimate[d.name] === "number") {
      const x = X(estimate[d.name], d.max);
      svg.append(SV.s("rect", { x: x - 3.5, y: y - 3.5, width: 7, height: 7, fill: "#1f5fbf", transform: `rotate(45 ${x} ${y})` }));
    }
  });
  svg.append(SV.s("text", { x: 0, y: dims.length * rowH + 12 }, "○ before · ● after the reply · ◆ estimate"));
  return svg;
};
SV.pages.call = async function (main, params) {
  const d = await SV.api(`/api/dialogue?${SV.q({ file: params.file, index: params.index })}`);
  const rec = d.record, h = SV.h, dims = d.dimensions, i = d.index;
  const profile = rec.profile || {};
  const series = SV.stateSeries(rec, dims);
  const charts = series.map((s) => h("div", { class: "card", "data-testid": `series-${s.dim.name}` },
    h("span", { class: "hidden-series", "data-values": JSON.stringify(s.hidden.map((p) => p.y)) }),
    h("span", { class: "estimate-series", "data-values": JSON.stringify(s.estimate.map((p) => p.y)) }),
    SV.chart({ width: 300, height: 170, xlabel: "turn", ymin: 0, ymax: s.dim.max, title: s.dim.name, series: [
      { name: "hidden state", color: "#2b8a3e", points: s.hidden },
      { name: "agent's estimate", color: "#1f5fbf", dash: "4 3", marker: "diamond", points: s.estimate }] })));
  const turns = rec.turns.map((t, k) => {
    const before = k === 0 ? profile : rec.turns[k - 1].user_state;
    return h("div", { class: "turn", "data-testid": "turn" },
      h("div", {},
        h("div", { class: "bubble agent", "data-testid": "agent-words" }, h("span", { class: "who" }, `agent · turn ${k + 1}` + (t.agent_tokens ? ` · ${t.agent_tokens} tokens` : "")),
          t.scripted ? SV.badge("scripted start", "fmt") : null,
          h("span", { class: "words" }, t.agent || "…"), t.agent_parse_ok === false ? SV.badge("format failure", "fmt") : null,
          d.made_up && d.made_up[k] && d.made_up[k].length ? h("span", { "data-testid": "made-up", title: d.made_up[k].join("\n") },
            SV.badge(`not the scenario's: ${d.made_up[k].length} sentence(s)`, "fmt")) : null),
        h("details", { class: "raw" }, h("summary", {}, "raw output"), h("pre", {}, t.agent_raw || "")),
        t.user !== null && t.user !== undefined ? h("div", { class: "bubble user", "data-testid": "user-words" },
          h("span", { class: "who" }, "callee"), h("span", { class: "words" }, t.user), t.user_status && t.user_status !== "continue" ? SV.badge(t.user_status) : null) : null,
        t.user_heard && t.user_heard.length ? h("details", { class: "raw", "data-testid": "user-heard" },
          h("summary", {}, `what the user heard: ${t.user_heard[0].verdict}` + agendaText(t)),
          h("pre", {}, t.user_heard.slice(1).map((r) => JSON.stringify(r)).join("\n"))) : null),
      SV.turnChart(dims, before, t.agent_estimate, t.user_state));
  });
  const nav = h("p", {},
    i > 0 ? h("a", { href: SV.link("call", { file: d.file, index: i - 1 }) }, "‹ previous call") : null, " ",
    h("a", { href: SV.link("dialogues", { file: d.file }) }, "all calls of this file"), " ",
    i + 1 < d.total ? h("a", { href: SV.link("call", { file: d.file, index: i + 1 }) }, "next call ›") : null);
  const same = h("div", { "data-testid": "same-profile" }, h("span", { class: "muted" }, "looking for this profile elsewhere…"));
  SV.put(main, h("h2", {}, `Call ${rec.dialogue_id || "#" + i}`), nav,
    h("div", { class: "card" },
      h("div", {}, SV.badge(rec.outcome || "?"), " ended by ", h("b", { "data-testid": "end-reason" }, rec.end_reason),
        ` after ${rec.turns.length} agent turn(s) · reward ${SV.fmt(d.reward)} · ${rec.agent_tokens ?? "?"} agent tokens · `,
        `${rec.agent_parse_failures ?? 0} format failure(s)` + (d.band ? ` · band when drawn: ${d.band}` : "") + ` · ${d.file}:${d.line}`),
      h("div", {}, "profile: ", dims.map((x) => `${x.name} ${profile[x.name]}/${x.max}`).join(", "),
        profile.user_set ? ` · user set ${profile.user_set}` : "", (profile.behaviors || []).length ? ` · ${profile.behaviors.join("; ")}` : "",
        typeof profile.start_depth === "number" ? h("span", { "data-testid": "start" },
          ` · started ${profile.start_depth} turn(s) before the honest script's ask (its turns marked "scripted start")`) : ""),
      rec.error ? h("div", { class: "error" }, `error: ${rec.error}`) : null),
    h("div", { class: "row" }, charts), h("h3", {}, "The call (spoken words only)"), h("div", { class: "chat" }, turns),
    h("h3", {}, "The same profile elsewhere (before / after)"), same);
  SV.api(`/api/same_profile?${SV.q({ file: d.file, index: i })}`).then((rows) => {
    SV.put(same, rows.length ? h("ul", {}, rows.map((r) => h("li", {},
      h("a", { href: SV.link("call", { file: r.file, index: r.index }) }, `${r.file} #${r.index}`), " ", SV.badge(r.outcome || "?"), ` ${r.end_reason}`)))
      : h("p", { class: "muted" }, "No other call of this profile (initial state, behaviours, user set) in this folder."),
    h("a", { href: SV.link("dialogues", { file: d.file, profile: d.summary.profile }) }, "this profile in this file"));
  }).catch((e) => SV.put(same, SV.error(e.message)));
};
