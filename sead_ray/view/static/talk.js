// sead-ray view: the compare page and the talk page (the user plays the callee against an agent).
"use strict";

// ---------------------------------------------------------------------------- compare
SV.pages.compare = async function (main, params) {
  const h = SV.h, list = SV.folder.compares;
  const path = params.path ?? (list.length ? list[0] : null);
  if (path === null) {
    SV.put(main, h("h2", {}, "Compare"), h("p", {}, "No comparison here: `sead-ray compare` and `sead-ray ablate` write compare.json."));
    return;
  }
  const c = await SV.api(`/api/compare?${SV.q({ path })}`);
  const rows = c.rows.map((r) => {
    const pv = r.paired_vs_first;
    const bar = SV.s("svg", { width: 120, height: 14 },
      SV.s("line", { x1: 0, x2: 120, y1: 7, y2: 7, stroke: "#e4e8ef" }),
      typeof r.cr === "number" ? [SV.s("line", { x1: 120 * r.cr_low, x2: 120 * r.cr_high, y1: 7, y2: 7, stroke: "#1f5fbf", "stroke-width": 3 }),
        SV.s("circle", { cx: 120 * r.cr, cy: 7, r: 4, fill: "#1f5fbf" })] : []);
    return h("tr", { "data-agent": r.agent },
      h("td", {}, r.agent), "user_set" in r ? h("td", {}, r.user_set || "–") : null,
      h("td", { class: "num" }, r.n), h("td", { class: "num" }, r.errors),
      h("td", { class: "num", "data-testid": "cr" }, `${SV.fmt(r.cr, 3)} [${SV.fmt(r.cr_low, 3)}, ${SV.fmt(r.cr_high, 3)}]`), h("td", {}, bar),
      h("td", { class: "num" }, r.att === null ? "–" : `${SV.fmt(r.att)} ± ${SV.fmt(r.att_std)}`),
      h("td", { class: "num" }, r.upa === null || r.upa === undefined ? "–" : `${SV.fmt(r.upa, 3)}`),
      h("td", { "data-testid": "paired" }, pv ? `${pv.better} better / ${pv.worse} worse of ${pv.pairs} · p ${pv.p_better.toPrecision(2)} / ${pv.p_worse.toPrecision(2)}` : "(reference)"),
      h("td", {}, c.files[r.agent] ? h("a", { href: SV.link("dialogues", { file: c.files[r.agent] }) }, "calls") : "–"));
  });
  const split = c.rows.some((r) => "user_set" in r);
  const differ = c.differ.map((x) => h("tr", {},
    h("td", { class: "num" }, x.index), h("td", {}, x.state || "–"), h("td", {}, x.agent),
    h("td", {}, h("a", { href: SV.link("call", { file: x.first, index: x.index }) }, "first agent"), " ", SV.badge(x.first_outcome)),
    h("td", {}, h("a", { href: SV.link("call", { file: x.other, index: x.index }) }, "this agent"), " ", SV.badge(x.outcome))));
  SV.put(main, h("h2", {}, "Compare"),
    list.length > 1 ? h("div", { class: "controls" }, SV.select("comparison", "path", list.map((p) => [p, SV.sourceLabel(p)]), path, (v) => SV.go("compare", { path: v }))) : null,
    h("p", { class: "muted" }, c.title),
    h("table", { "data-testid": "compare" }, h("tr", {}, ["agent", split ? "user set" : null, "n", "errors", "CR [95 % CI]", "", "ATT ± std", "UPA",
      "vs first (paired, McNemar one-sided)", ""].filter((t) => t !== null).map((t) => h("th", {}, t))), rows),
    h("h3", {}, `Calls where an agent's outcome differs from the first agent's (${c.differ_total})`),
    c.differ.length ? h("table", {}, h("tr", {}, ["profile #", "initial state", "agent", "first agent's call", "this agent's call"].map((t) => h("th", {}, t))), differ)
      : h("p", { class: "muted" }, "None: every agent had the first agent's outcome on every profile."),
    c.ablation ? [h("h3", {}, "ablation.md"), h("pre", { class: "verdict" }, c.ablation)] : null);
};

// ---------------------------------------------------------------------------- talk
SV.pages.talk = async function (main) {
  const h = SV.h, F = SV.folder;
  const settings = F.runs.concat(F.evals);
  if (!settings.length) throw new Error("no run or evaluation folder with a config.yaml here: the talk page needs its scenario");
  const agents = F.runs.filter((r) => F.checkpoints[r]).map((r) => [`run:${r}`, `${SV.sourceLabel(r)}: latest checkpoint (${F.checkpoints[r]}), local engine`])
    .concat(F.scripts.map((s) => [`script:${s}`, `script:${s} (scripted, no engine)`]), [["other", "openai:MODEL@URL or another model…"]]);
  const config = h("select", { name: "config" }, settings.map((s) => h("option", { value: s }, SV.sourceLabel(s))));
  const agent = h("select", { name: "agent" }, agents.map(([v, t]) => h("option", { value: v }, t)));
  const other = h("input", { name: "agent-ref", placeholder: "openai:agent@http://127.0.0.1:8000/v1", size: 40 });
  const behaviors = h("input", { name: "behaviors", placeholder: "optional: behaviours you play, separated by ;", size: 40 });
  const area = h("div", { "data-testid": "talk" });
  const start = h("button", { "data-testid": "start", onclick: async () => {
    start.disabled = true;
    SV.put(area, h("p", { class: "muted" }, "calling… (a local engine takes a minute to start the first time)"));
    const ref = agent.value === "other" ? other.value.trim() : agent.value;
    try {
      const s = await SV.api("/api/talk", { config: config.value, agent: ref, behaviors: behaviors.value.split(";").map((b) => b.trim()).filter(Boolean) });
      SV.talkView(area, s);
    } catch (e) { SV.put(area, SV.error(e.message)); }
    start.disabled = false;
  } }, "Call me");
  SV.put(main, h("h2", {}, "Talk to the agent"),
    h("p", { class: "muted" }, "You are the callee. The agent hears only your words; after each reply set your own state (it is recorded as the " +
      "callee's state, beside the agent's estimate), and end the call when you decide. Saved calls go to talks/ in this folder, as dialogue records."),
    h("div", { class: "controls" }, h("label", {}, "scenario and settings of", config), h("label", {}, "agent", agent), h("label", {}, "model reference", other),
      h("label", {}, "behaviours", behaviors), start), area);
};
SV.talkView = function (area, s) {
  const h = SV.h, dims = s.dimensions.map((d) => ({ name: d.name, max: d.levels.length - 1, levels: d.levels }));
  const last = s.turns[s.turns.length - 1];
  const prevState = (k) => (k > 0 ? s.turns[k - 1].user_state : null);
  const turns = s.turns.map((t, k) => h("div", { class: "turn", "data-testid": "talk-turn" },
    h("div", {},
      h("div", { class: "bubble agent", "data-testid": "agent-words" }, h("span", { class: "who" }, `agent · turn ${k + 1}`), t.agent || "…",
        t.agent_parse_ok === false ? SV.badge("format failure", "fmt") : null,
        h("span", { class: "estimate", "data-testid": "estimate", "data-values": JSON.stringify(t.agent_estimate) },
          t.agent_estimate ? ` · estimate: ${dims.map((d) => `${d.name} ${t.agent_estimate[d.name]}`).join(", ")}` : " · no estimate")),
      t.user ? h("div", { class: "bubble user", "data-testid": "user-words" }, h("span", { class: "who" }, "you"), t.user,
        t.user_status !== "continue" ? SV.badge(t.user_status) : null) : null),
    SV.turnChart(dims, prevState(k), t.agent_estimate, t.user_state)));
  const out = [h("p", { class: "muted" }, `${s.opening} · agent ${s.agent}`), ...turns];
  const save = h("button", { class: "secondary", "data-testid": "save", onclick: async () => {
    try {
      const r = await SV.api(`/api/talk/${s.id}/save`, {});
      SV.folder = null;   // the talks folder changed
      SV.put(saved, "saved as ", h("a", { href: SV.link("call", { file: r.path, index: 0 }), "data-testid": "saved-path" }, r.path));
    } catch (e) { SV.put(saved, SV.error(e.message)); }
  } }, "Save this call");
  const saved = h("span", { "data-testid": "saved" });
  if (!s.over) {
    const text = h("textarea", { name: "say", "data-testid": "say", placeholder: "what you say" });
    const state = last.user_state || (s.turns.length > 1 ? s.turns[s.turns.length - 2].user_state : null);
    const pickers = dims.map((d) => h("select", { name: `state-${d.name}` }, d.levels.map((lv, l) =>
      h("option", { value: l, selected: (state ? state[d.name] : Math.floor(d.max / 2)) === l ? "selected" : null }, `${l}: ${lv}`))));
    const status = h("select", { name: "status" }, ["continue", "accept", "refuse", "hangup"].map((x) => h("option", { value: x }, x)));
    const send = h("button", { "data-testid": "send", onclick: async () => {
      send.disabled = true;
      try {
        const next = await SV.api(`/api/talk/${s.id}/say`, { text: text.value, status: status.value,
          state: Object.fromEntries(dims.map((d, i) => [d.name, Number(pickers[i].value)])) });
        SV.talkView(area, next);
      } catch (e) { send.disabled = false; area.append(SV.error(e.message)); }
    } }, "Say it");
    out.push(h("div", { class: "card talk-input" }, text,
      h("div", { class: "controls" }, dims.map((d, i) => h("label", {}, `your ${d.name} after this`, pickers[i])), h("label", {}, "the call", status), send)));
  } else {
    out.push(h("p", { "data-testid": "over" }, `The call is over (${s.status === "continue" ? "turn limit" : s.status}).`));
  }
  out.push(h("p", {}, save, " ", saved));
  SV.put(area, ...out);
};
