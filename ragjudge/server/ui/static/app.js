// ragjudge ui: hand-written, no framework, no build step. Every piece of data from the server
// (queries, passages, reasoning, names) is untrusted text: the DOM is built with
// createElement + textContent only, never innerHTML.
"use strict";

const TOKEN_KEY = "ragjudge-token";
const NAME_KEY = "ragjudge-assessor";
const main = () => document.getElementById("main");
let overview = null;

// ----------------------------------------------------------------------------- helpers
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}
const fmt = (x, d = 4) => (x === null || x === undefined || Number.isNaN(x)) ? "–" : Number(x).toFixed(d);
const ci = (pair, d = 4) => pair ? el("span", { class: "ci" }, ` [${fmt(pair[0], d)}, ${fmt(pair[1], d)}]`) : null;
const link = (href, text) => el("a", { href }, text);
const qs = (params) => new URLSearchParams(Object.entries(params).filter(([, v]) => v !== "" && v !== null && v !== undefined)).toString();

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (token()) headers["Authorization"] = "Bearer " + token();
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch("/ui/api/" + path, {
    method: options.method || "GET", headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  if (r.status === 401) { askToken(); throw new Error("this server needs its token"); }
  const type = r.headers.get("content-type") || "";
  const data = type.includes("json") ? await r.json() : await r.text();
  if (!r.ok) throw new Error((data && data.detail) || `HTTP ${r.status}`);
  return data;
}

function show(...nodes) { const m = main(); m.replaceChildren(...nodes); }
function showError(e) { show(el("p", { class: "err" }, String(e.message || e))); }

function askToken() {
  const input = el("input", { type: "password", size: 40, "aria-label": "token" });
  show(el("h1", {}, "Token"),
    el("p", {}, "Paste the token printed by ragjudge ui (or the server's $RAGJUDGE_TOKEN)."),
    el("form", { onsubmit: (ev) => { ev.preventDefault(); sessionStorage.setItem(TOKEN_KEY, input.value.trim()); route(); } },
      input, " ", el("button", { class: "primary" }, "Use")));
}

function pager(page, go) {
  const { total, offset, limit } = page;
  const last = Math.max(0, total - 1);
  return el("div", { class: "controls" },
    el("button", { disabled: offset <= 0, onclick: () => go(Math.max(0, offset - limit)) }, "‹ previous"),
    el("span", { class: "muted" }, total ? `${offset + 1}–${Math.min(total, offset + limit)} of ${total}` : "none"),
    el("button", { disabled: offset + limit > last, onclick: () => go(offset + limit) }, "next ›"));
}

function gradeBadge(label, who) {
  if (!label || label.grade === null || label.grade === undefined) return el("span", { class: "badge" }, `${who}: –`);
  return el("span", { class: `badge g${label.grade}` }, `${who}: ${label.grade}`);
}

// ----------------------------------------------------------------------------- routing
function parseHash() {
  const h = location.hash.replace(/^#/, "");
  const [path, query] = h.split("?");
  return { parts: (path || "/").split("/").filter(Boolean).map(decodeURIComponent), params: new URLSearchParams(query || "") };
}
function go(path, params) { location.hash = "#/" + path + (params ? "?" + qs(params) : ""); }

function renderNav(current) {
  const items = [["", "Files"]];
  if (overview) {
    if (overview.results.length) items.push(["results/0", "Results"]);
    if (overview.queries) items.push(["queries", "Queries"]);
    if (overview.agreement) items.push(["agreement", "Agreement"]);
    if (overview.labelling) items.push(["label", "Label"]);
    if (overview.nuggets && overview.nuggets.answers) items.push(["answers", "Answers"]);
    if (overview.nuggets && overview.nuggets.labelling) items.push(["nuglabel", "Assign nuggets"]);
  }
  document.getElementById("nav").replaceChildren(...items.map(([p, t]) =>
    el("a", { href: "#/" + p, class: (current === p.split("/")[0]) ? "on" : null }, t)));
}

async function route() {
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (m) {  // the token travels in the fragment (never sent to the server); keep it out of the URL
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + "#/");
  }
  const { parts, params } = parseHash();
  try {
    if (!overview) overview = await api("overview");
    renderNav(parts[0] || "");
    const view = parts[0] || "";
    if (view !== "label" && view !== "nuglabel") document.onkeydown = null;
    if (view === "") return viewFiles();
    if (view === "results") return await viewResults(Number(parts[1] || 0));
    if (view === "diff") return await viewDiff(Number(parts[1] || 0), params);
    if (view === "queries") return await viewQueries(params);
    if (view === "query") return await viewQuery(parts.slice(1).join("/"), params);
    if (view === "agreement") return await viewAgreement(params);
    if (view === "label") return await viewLabel(params);
    if (view === "answers") return await viewAnswers(params);
    if (view === "answer") return await viewAnswer(params);
    if (view === "nuglabel") return await viewNugLabel(params);
    show(el("p", { class: "err" }, "No such page."));
  } catch (e) { if (!/token/.test(String(e.message))) showError(e); }
}
window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", route);

// ----------------------------------------------------------------------------- files
function viewFiles() {
  const o = overview;
  const rows = o.files.map((f) => el("tr", {}, el("td", {}, f.role), el("td", {}, f.name),
    el("td", { class: "muted" }, Object.entries(f).filter(([k]) => !["id", "role", "name"].includes(k)).map(([k, v]) => `${k} ${v}`).join(", "))));
  const views = [];
  o.results.forEach((r) => views.push(el("li", {}, link(`#/results/${r.id}`, `Results of ${r.name}`), ` (${r.runs.length} runs, ${r.metrics.join(", ")})`)));
  if (o.queries) views.push(el("li", {}, link("#/queries", `Queries (${o.queries})`), o.runs.length ? ` with the ranked passages of ${o.runs.join(", ")}` : ""));
  if (o.agreement) views.push(el("li", {}, link("#/agreement", "Agreement of human and LLM labels")));
  if (o.labelling) views.push(el("li", {}, link("#/label", "Label pairs for PPI")));
  if (o.nuggets && o.nuggets.answers) views.push(el("li", {}, link("#/answers", `Answers and their nuggets (${o.nuggets.answers})`)));
  if (o.nuggets && o.nuggets.labelling) views.push(el("li", {}, link("#/nuglabel", "Assign nuggets for PPI")));
  show(el("h1", {}, "Files"), el("table", {}, el("tr", {}, el("th", {}, "role"), el("th", {}, "file"), el("th", {}, "contents")), rows),
    el("h2", {}, "Views"), el("ul", {}, views));
}

// ----------------------------------------------------------------------------- results
async function viewResults(rid) {
  const t = await api(`results/${rid}`);
  const head = el("tr", {}, el("th", {}, "run"), t.metrics.map((m) => el("th", {}, m)));
  const rows = t.rows.map((r) => el("tr", {},
    el("td", {}, r.run, r.run === t.baseline ? el("span", { class: "muted" }, " (baseline)") : null),
    t.metrics.map((m) => {
      const c = r.cells[m];
      const cmp = c.comparison;
      return el("td", { class: "num" }, fmt(c.mean), ci(c.ci),
        cmp ? el("div", { class: "ci" },
          el("span", { class: cmp.delta >= 0 ? "pos" : "neg" }, `Δ ${cmp.delta >= 0 ? "+" : ""}${fmt(cmp.delta)}`),
          ci(cmp.delta_ci), ` p=${fmt(cmp.p_adjusted ?? cmp.p_value, 4)}`,
          cmp.significant ? el("span", { class: "sig", title: "significant after correction" }, " ✱") : null,
          " ", link(`#/diff/${rid}?${qs({ metric: m, a: r.run, b: cmp.baseline })}`, "per query")) : null);
    })));
  const meta = t.meta;
  show(el("h1", {}, `Runs × metrics — ${t.name}`), el("table", { id: "results" }, head, rows),
    el("p", { class: "muted" }, meta.test ? `Intervals: ${meta.ci_method || "bootstrap"} ${Math.round(100 * (meta.confidence || 0.95))}%; Δ against ${t.baseline}, ${meta.test} test, p adjusted (${meta.correction}) over ${meta.family}; ✱ significant at α=${meta.alpha}.` : "No comparison in this result (ragjudge compare -f json gives intervals and tests)."),
    t.rows.length > 1 ? el("p", {}, link(`#/diff/${rid}?${qs({ metric: t.metrics[0], a: t.rows[1].run, b: t.rows[0].run })}`, "Per-query differences")) : null);
}

async function viewDiff(rid, params) {
  const res = overview.results[rid];
  if (!res) throw new Error("no such result");
  const metric = params.get("metric") || res.metrics[0];
  const a = params.get("a") || res.runs[1] || res.runs[0];
  const b = params.get("b") || res.runs[0];
  const order = params.get("order") || "desc";
  const q = params.get("q") || "";
  const offset = Number(params.get("offset") || 0);
  const set = (k, v) => go(`diff/${rid}`, Object.assign({ metric, a, b, order, q }, { [k]: v, offset: k === "offset" ? v : 0 }));
  const select = (k, values, cur) => el("select", { onchange: (ev) => set(k, ev.target.value), "aria-label": k },
    values.map((v) => el("option", { value: v, selected: v === cur }, v)));
  const search = el("input", { type: "search", placeholder: "filter queries", value: q, onchange: (ev) => set("q", ev.target.value) });
  const controls = el("div", { class: "controls" }, el("label", {}, "metric", select("metric", res.metrics, metric)),
    el("label", {}, "run", select("a", res.runs, a)), el("label", {}, "minus", select("b", res.runs, b)),
    el("label", {}, "order", select("order", ["desc", "asc", "abs"], order)), search);
  let d;
  try { d = await api(`results/${rid}/diff?${qs({ metric, a, b, order, q, offset, limit: 50 })}`); }
  catch (e) { show(el("h1", {}, "Per-query differences"), controls, el("p", { class: "err" }, e.message)); return; }
  const maxAbs = Math.max(1e-9, ...d.items.map((r) => Math.abs(r.delta)));
  const rows = d.items.map((r) => el("tr", {},
    el("td", {}, link(`#/query/${encodeURIComponent(r.qid)}`, r.qid)), el("td", {}, r.query || ""),
    el("td", { class: "num" }, fmt(r.a)), el("td", { class: "num" }, fmt(r.b)),
    el("td", { class: "num " + (r.delta > 0 ? "pos" : r.delta < 0 ? "neg" : "") }, fmt(r.delta)),
    el("td", {}, el("span", { class: "bar " + (r.delta >= 0 ? "pos" : "neg") }))));
  // widths set through the style object (no markup built from strings)
  rows.forEach((tr, i) => { tr.lastChild.firstChild.style.width = `${Math.round(120 * Math.abs(d.items[i].delta) / maxAbs)}px`; });
  show(el("h1", {}, `Per-query differences: ${a} − ${b}, ${metric}`), controls,
    el("p", {}, `${d.wins} queries better, ${d.losses} worse, ${d.ties} tied.`),
    el("table", { id: "diff" }, el("tr", {}, ["query", "text", a, b, "Δ", ""].map((h) => el("th", {}, h))), rows),
    pager(d, (o) => set("offset", o)));
}

// ----------------------------------------------------------------------------- queries
async function viewQueries(params) {
  const q = params.get("q") || "";
  const offset = Number(params.get("offset") || 0);
  const page = await api(`queries?${qs({ q, offset, limit: 50 })}`);
  const search = el("input", { type: "search", placeholder: "filter queries", value: q, onchange: (ev) => go("queries", { q: ev.target.value }) });
  show(el("h1", {}, "Queries"), el("div", { class: "controls" }, search),
    el("table", {}, el("tr", {}, el("th", {}, "id"), el("th", {}, "query")),
      page.items.map((r) => el("tr", {}, el("td", {}, link(`#/query/${encodeURIComponent(r.qid)}`, r.qid)), el("td", {}, r.query || "")))),
    pager(page, (o) => go("queries", { q, offset: o })));
}

function labelDetails(item) {
  const h = item.human, l = item.llm;
  const out = el("div", { class: "head" }, gradeBadge(h, "human"), gradeBadge(l, "LLM"));
  const lines = [];
  if (h) lines.push(el("div", { class: "muted" }, `human: ${h.who ? h.who + ", " : ""}${h.source || ""}${h.at ? ", " + h.at : ""}`));
  if (l) {
    lines.push(el("div", { class: "muted" }, `LLM: ${[l.model, l.prompt, l.source].filter(Boolean).join(", ")}`));
    if (l.probs) lines.push(el("div", { class: "muted" }, "grade probabilities: " + Object.entries(l.probs).map(([g, p]) => `${g}: ${fmt(p, 2)}`).join("  ")));
    if (l.reasoning) lines.push(el("details", {}, el("summary", {}, "judge's reasoning"), el("div", { class: "reasoning passage" }, l.reasoning)));
  }
  return [out, ...lines];
}

async function viewQuery(qid, params) {
  const depth = Number(params.get("depth") || 10);
  const d = await api(`query?${qs({ qid, depth })}`);
  const values = d.values.length ? el("table", {}, el("tr", {}, el("th", {}, "run"), el("th", {}, "per-query values")),
    d.values.map((v) => el("tr", {}, el("td", {}, v.run), el("td", {}, Object.entries(v.values).map(([m, x]) => `${m} ${fmt(x)}`).join("   "))))) : null;
  const runs = d.runs.map((r) => el("section", { class: "run" }, el("h2", {}, r.run),
    r.items.length ? r.items.map((it) => el("div", { class: "card" },
      el("div", { class: "head" }, el("strong", {}, `#${it.rank}`), el("code", {}, it.docid), el("span", { class: "muted" }, `score ${fmt(it.score, 3)}`)),
      el("div", { class: "passage" }, it.text === null ? "(not in the corpus given)" : it.text),
      labelDetails(it))) : el("p", { class: "muted" }, "nothing retrieved")));
  const depthSel = el("select", { onchange: (ev) => go(`query/${encodeURIComponent(qid)}`, { depth: ev.target.value }), "aria-label": "depth" },
    [5, 10, 20, 50, 100].map((k) => el("option", { value: k, selected: k === depth }, `top ${k}`)));
  show(el("h1", {}, `${d.qid}: `, el("span", { class: "query-text" }, d.query || "(no text)")),
    values, el("div", { class: "controls" }, depthSel),
    d.runs.length ? el("div", { class: "runs" }, runs) : el("p", { class: "muted" }, "No run files given: only per-query values."));
}

// ----------------------------------------------------------------------------- agreement
async function viewAgreement(params) {
  const human = params.get("human"), llm = params.get("llm");
  const offset = Number(params.get("offset") || 0);
  const a = await api(`agreement?${qs({ human, llm, offset, limit: 25 })}`);
  const pick = (h, l) => go("agreement", { human: h, llm: l });
  const matrix = el("table", { class: "matrix", id: "confusion" },
    el("tr", {}, el("th", {}, "human ↓ / LLM →"), a.grades.map((g) => el("th", {}, String(g))), el("th", {}, "all")),
    a.grades.map((g, i) => el("tr", {}, el("th", { onclick: () => pick(g, null) }, String(g)),
      a.matrix[i].map((n, j) => el("td", {
        class: [i === j ? "diag" : "", String(g) === human && String(a.grades[j]) === llm ? "sel" : ""].join(" ").trim() || null,
        title: `human ${g}, LLM ${a.grades[j]}`, onclick: () => pick(g, a.grades[j]),
      }, String(n))), el("td", { onclick: () => pick(g, null) }, String(a.matrix[i].reduce((x, y) => x + y, 0))))));
  const gradeSel = (k, cur) => el("select", { "aria-label": k, onchange: (ev) => go("agreement", { human, llm, [k]: ev.target.value }) },
    el("option", { value: "" }, "any"), a.grades.map((g) => el("option", { value: g, selected: String(g) === cur }, String(g))));
  const rows = a.items.map((r) => el("div", { class: "card" },
    el("div", { class: "head" }, link(`#/query/${encodeURIComponent(r.qid)}`, r.qid), el("code", {}, r.docid),
      el("span", { class: "muted" }, `distance ${fmt(r.distance, 2)}`)),
    r.query ? el("div", { class: "query-text" }, r.query) : null,
    r.text !== null && r.text !== undefined ? el("div", { class: "passage" }, r.text) : null, labelDetails(r)));
  show(el("h1", {}, "Agreement: human vs LLM labels"),
    el("p", {}, `${a.n} pairs labelled by both; exact agreement ${fmt(100 * a.exact, 1)}%, Cohen's κ ${fmt(a.kappa, 3)}, linear-weighted κ ${fmt(a.kappa_linear, 3)}.`),
    matrix, el("h2", {}, "Most disagreeing pairs"),
    el("div", { class: "controls" }, el("label", {}, "human grade", gradeSel("human", human)), el("label", {}, "LLM grade", gradeSel("llm", llm))),
    el("p", { class: "muted" }, "Sorted by |human − LLM| (expected under the judge's grade probabilities when it gave them)."),
    el("div", { id: "disagreeing" }, rows.length ? rows : el("p", { class: "muted" }, "No pair with these grades.")),
    pager(a, (o) => go("agreement", { human, llm, offset: o })));
}

// ----------------------------------------------------------------------------- labelling
const L = { state: null, index: 0, pair: null, reveal: false, busy: false };

async function viewLabel(params) {
  L.state = await api("label/state");
  const want = params.get("i");
  L.index = want !== null ? Number(want) : (L.state.next ?? Math.max(0, L.state.total - 1));
  await loadPair();
  document.onkeydown = onKey;
}

async function loadPair() {
  // Showing the LLM's grade is a choice made per pair (and recorded with the label): a new
  // pair starts hidden, so no label leans on the model's by default.
  if (!L.pair || L.pair.index !== L.index) L.reveal = false;
  L.pair = await api(`label/pair/${L.index}?${qs({ reveal: L.reveal ? 1 : 0, who: L.reveal ? assessor() : "" })}`);
  renderLabel();
  refreshPPI();
}

function assessor() { return (localStorage.getItem(NAME_KEY) || "").trim(); }

function renderLabel() {
  const s = L.state, p = L.pair;
  const name = el("input", { id: "who", value: assessor(), placeholder: "your name", size: 18,
    oninput: (ev) => localStorage.setItem(NAME_KEY, ev.target.value) });
  const reveal = el("input", { type: "checkbox", id: "reveal", checked: L.reveal,
    onchange: async (ev) => { L.reveal = ev.target.checked; await loadPair(); } });
  const chosen = p.label ? p.label.grade : undefined;
  const scale = el("div", { class: "scale" }, Object.entries(s.labels).map(([g, text]) =>
    el("button", { class: chosen !== undefined && String(chosen) === g ? "chosen" : null, "data-grade": g, onclick: () => give(Number(g)) },
      el("kbd", {}, g), el("span", {}, text))),
    el("button", { class: chosen === null ? "chosen" : null, onclick: () => give(null) }, el("kbd", {}, "s"), el("span", {}, "skip / unsure")));
  const done = s.labelled;
  const box = el("div", { class: "label-box" },
    el("div", { class: "controls" }, el("label", {}, "assessor", name),
      el("label", { title: "recorded with your label: PPI assumes labels given without the model's grade" }, reveal, "show the LLM's grade (this pair; recorded)"),
      el("button", { onclick: exportQrels }, "export TREC qrels")),
    el("div", { id: "progress-text" }, `${done} of ${s.total} pairs labelled (${s.skipped} skipped); ${s.complete_queries} of ${s.queries} queries complete`),
    el("div", { class: "progress" }, el("div", { style: null })),
    el("div", { class: "muted" }, `pair ${p.index + 1} of ${s.total} · query ${p.qid} · document ${p.docid}`),
    el("div", { class: "query-text", id: "query" }, p.query),
    el("div", { class: "passage card", id: "passage" }, p.passage),
    p.label ? el("div", { class: "muted", id: "current" }, `labelled ${p.label.grade === null ? "skip" : p.label.grade} by ${p.label.who || "?"} at ${p.label.at}`) : null,
    L.reveal ? el("div", { id: "llm-grade" }, gradeBadge({ grade: p.llm_grade }, "LLM")) : null,
    scale,
    el("div", { class: "controls" },
      el("button", { onclick: () => move(-1), disabled: p.index <= 0 }, "← previous"),
      el("button", { onclick: undo }, "undo (u)"),
      el("button", { onclick: () => move(1), disabled: p.index >= s.total - 1 }, "next →")),
    el("p", { class: "keys muted" }, "Keys: ", Object.keys(s.labels).map((g) => el("kbd", {}, g)), " grade · ",
      el("kbd", {}, "s"), " skip/unsure · ", el("kbd", {}, "u"), " undo · ", el("kbd", {}, "←"), el("kbd", {}, "→"), " previous/next"));
  box.querySelector(".progress > div").style.width = `${(100 * done / Math.max(1, s.total)).toFixed(1)}%`;
  const ppi = el("aside", { class: "ppi", id: "ppi" }, el("h2", {}, "PPI estimate"), el("p", { class: "muted" }, "…"));
  show(el("h1", {}, "Label pairs for PPI"), el("div", { class: "split" }, box, ppi));
}

async function give(grade) {
  if (L.busy) return;
  L.busy = true;
  try {
    L.state = await api("label", { method: "POST", body: { index: L.index, grade, who: assessor() } });
    L.index = L.state.next ?? L.index;
    await loadPair();
  } catch (e) { showError(e); } finally { L.busy = false; }
}

async function undo() {
  if (L.busy) return;
  L.busy = true;
  try {
    L.state = await api("label/undo", { method: "POST", body: { who: assessor() } });
    if (L.state.undone !== null && L.state.undone !== undefined) L.index = L.state.undone;
    await loadPair();
  } catch (e) { showError(e); } finally { L.busy = false; }
}

async function move(step) {
  const i = L.index + step;
  if (i < 0 || i >= L.state.total) return;
  L.index = i;
  await loadPair();
}

function onKey(ev) {
  if (ev.target && ["INPUT", "SELECT", "TEXTAREA"].includes(ev.target.tagName) && ev.target.type !== "checkbox") return;
  if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const k = ev.key;
  if (L.state && Object.prototype.hasOwnProperty.call(L.state.labels, k)) { ev.preventDefault(); give(Number(k)); }
  else if (k === "s") { ev.preventDefault(); give(null); }
  else if (k === "u") { ev.preventDefault(); undo(); }
  else if (k === "ArrowLeft") { ev.preventDefault(); move(-1); }
  else if (k === "ArrowRight") { ev.preventDefault(); move(1); }
}

async function refreshPPI() {
  const box = document.getElementById("ppi");
  if (!box) return;
  let r;
  try { r = await api("label/ppi"); } catch (e) { box.replaceChildren(el("h2", {}, "PPI estimate"), el("p", { class: "err" }, e.message)); return; }
  const parts = [el("h2", {}, "PPI estimate"),
    el("p", {}, el("strong", {}, "Estimand: "), `each run's ${r.metric}, ${r.estimand_text} (${r.estimand}), as human labels would give it; ${r.method.toUpperCase()}, ${Math.round(100 * r.confidence)}% Student-t intervals.`),
    el("p", { class: "muted" }, `${r.complete_queries} of ${r.sampled_queries} sampled queries complete.`)];
  if (r.status !== "ok") parts.push(el("p", { class: "muted", id: "ppi-status" }, r.status));
  else {
    parts.push(el("table", { id: "ppi-table" }, el("tr", {}, ["run", "PPI", "interval", "LLM only", "human only"].map((h) => el("th", {}, h))),
      r.estimates.map((e) => el("tr", {}, el("td", {}, e.run), el("td", { class: "num" }, fmt(e.mean)),
        el("td", { class: "num ppi-ci" }, `[${fmt(e.ci[0])}, ${fmt(e.ci[1])}]`),
        el("td", { class: "num" }, fmt(e.llm_only[0]), ci(e.llm_only.slice(1))),
        el("td", { class: "num" }, fmt(e.human_only[0]), ci(e.human_only.slice(1))))),
      r.differences.map((e) => el("tr", {}, el("td", {}, `${e.run} − ${e.baseline}`), el("td", { class: "num" }, fmt(e.mean)),
        el("td", { class: "num" }, `[${fmt(e.ci[0])}, ${fmt(e.ci[1])}]`),
        el("td", { class: "num" }, fmt(e.llm_only[0])), el("td", { class: "num" }, fmt(e.human_only[0]))))));
  }
  if (r.notes && r.notes.length) parts.push(el("ul", { id: "ppi-notes", class: "notes" }, r.notes.map((n) => el("li", {}, n))));
  parts.push(el("p", { class: "muted" }, r.note));
  box.replaceChildren(...parts);
}

async function exportQrels() {
  const headers = token() ? { Authorization: "Bearer " + token() } : {};
  const r = await fetch("/ui/api/label/qrels", { headers });
  if (!r.ok) { showError(new Error(`export failed: HTTP ${r.status}`)); return; }
  const url = URL.createObjectURL(await r.blob());
  const a = el("a", { href: url, download: "human.qrels" });
  document.body.appendChild(a); a.click(); a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// ----------------------------------------------------------------------------- nuggets
const NUG = { support: "support", partial_support: "partial", not_support: "not support" };
const NUG_CLASS = { support: "g2", partial_support: "g1", not_support: "g0" };
// keys of the assignments: the first letter and the grade's number on the scale
const NUG_KEYS = { support: ["y", "1"], partial_support: ["p", "2"], not_support: ["n", "3"] };

function nugBadge(assignment, who) {
  if (assignment === undefined) return null;
  const text = assignment === null ? "–" : (NUG[assignment] || assignment);
  return el("span", { class: `badge ${NUG_CLASS[assignment] || ""}` }, who ? `${who}: ${text}` : text);
}

async function viewAnswers(params) {
  const run = params.get("run") || "", q = params.get("q") || "";
  const offset = Number(params.get("offset") || 0);
  const page = await api(`nuggets/answers?${qs({ run, q, offset, limit: 50 })}`);
  const runs = overview.nuggets.runs;
  const runSel = el("select", { "aria-label": "run", onchange: (ev) => go("answers", { run: ev.target.value, q }) },
    el("option", { value: "" }, "all runs"), runs.map((r) => el("option", { value: r, selected: r === run }, r)));
  const search = el("input", { type: "search", placeholder: "filter queries", value: q, onchange: (ev) => go("answers", { run, q: ev.target.value }) });
  show(el("h1", {}, "Answers and their nuggets"), el("div", { class: "controls" }, runSel, search),
    el("table", { id: "answers" }, el("tr", {}, ["query", "run", "text", "nuggets", "all", "vital", ""].map((h) => el("th", {}, h))),
      page.items.map((r) => el("tr", {},
        el("td", {}, link(`#/answer?${qs({ run: r.run_id, qid: r.qid })}`, r.qid)), el("td", {}, r.run_id), el("td", {}, r.query || ""),
        el("td", { class: "num" }, String(r.nuggets)), el("td", { class: "num" }, fmt(r.all, 3)), el("td", { class: "num" }, fmt(r.vital, 3)),
        el("td", { class: "muted" }, r.note || "")))),
    pager(page, (o) => go("answers", { run, q, offset: o })));
}

async function viewAnswer(params) {
  const a = await api(`nuggets/answer?${qs({ run: params.get("run"), qid: params.get("qid") })}`);
  const prov = a.provenance || {};
  const rows = a.nuggets.map((n) => el("tr", {},
    el("td", {}, n.text), el("td", {}, n.importance || "–"),
    el("td", {}, n.llm.assignment === null ? el("span", { class: "err" }, n.llm.failure || "not assigned") : nugBadge(n.llm.assignment)),
    el("td", { class: "reasoning" }, n.llm.reason || ""),
    el("td", {}, n.human ? [nugBadge(n.human.assignment), el("div", { class: "muted" }, `${n.human.who || "?"}${n.human.llm_shown ? " (LLM's in view)" : ""}`)] : "")));
  show(el("h1", {}, `${a.qid} · ${a.run_id}: `, el("span", { class: "query-text" }, a.query || "")),
    a.sampled ? el("p", { class: "notes", id: "sampled" }, "This answer is in the sample people assign: seeing the LLM's assignments here is recorded, and labels of it are marked as given with them in view.") : null,
    el("div", { class: "passage card", id: "answer-text" }, a.answer || "(no answer text in the assignments file)"),
    el("p", {}, ["strict_vital", "vital", "strict_all", "all", "weighted"].map((m) => `${m} ${fmt(a.scores[m], 3)}`).join("   "),
      a.note ? el("span", { class: "muted" }, ` (${a.note})`) : null),
    el("table", { id: "answer-nuggets" }, el("tr", {}, ["nugget", "importance", "LLM", "LLM's reason", "human"].map((h) => el("th", {}, h))), rows),
    el("p", { class: "muted" }, `LLM: ${[prov.model, prov.prompt_id && `${prov.prompt_id} ${String(prov.prompt_sha || "").slice(0, 12)}`].filter(Boolean).join(", ")}`));
}

const N = { state: null, index: 0, answer: null, cursor: 0, review: false, busy: false };

async function viewNugLabel(params) {
  N.state = await api("nuggets/label/state");
  const want = params.get("i");
  N.index = want !== null ? Number(want) : (N.state.next ?? Math.max(0, N.state.answers - 1));
  N.answer = null;
  await loadAnswer();
  document.onkeydown = onNugKey;
}

function firstOpen(a) {
  const i = a.nuggets.findIndex((n) => !n.label);
  return i < 0 ? 0 : i;
}

async function loadAnswer(keepCursor) {
  // Review (the LLM's assignments and reasons in view) is a choice made per answer and
  // recorded with the labels: a new answer starts blind.
  const fresh = !N.answer || N.answer.index !== N.index;
  if (fresh) N.review = false;
  N.answer = await api(`nuggets/label/answer/${N.index}?${qs({ review: N.review ? 1 : 0, who: N.review ? assessor() : "" })}`);
  if (fresh && !keepCursor) N.cursor = firstOpen(N.answer);
  renderNugLabel();
  refreshNugPPI();
}

function renderNugLabel() {
  const s = N.state, a = N.answer;
  const name = el("input", { id: "who", value: assessor(), placeholder: "your name", size: 18,
    oninput: (ev) => localStorage.setItem(NAME_KEY, ev.target.value) });
  const review = el("input", { type: "checkbox", id: "review", checked: N.review,
    onchange: async (ev) => { N.review = ev.target.checked; await loadAnswer(true); } });
  const items = a.nuggets.map((n) => el("div", { class: "card nugget" + (n.index === N.cursor ? " current" : ""), "data-nugget": n.index,
    onclick: () => { N.cursor = n.index; renderNugLabel(); } },
    el("div", { class: "head" }, el("strong", {}, `${n.index + 1}.`), el("span", {}, n.text),
      el("span", { class: "muted" }, n.importance || ""), n.label ? nugBadge(n.label.assignment, n.label.who || "you") : null),
    n.llm ? el("div", { class: "llm" }, nugBadge(n.llm.assignment, "LLM"), " ", el("span", { class: "muted" }, n.llm.reason || "")) : null));
  const cur = a.nuggets[N.cursor];
  const chosen = cur && cur.label ? cur.label.assignment : undefined;
  const scale = el("div", { class: "scale" }, s.labels.map((lab) =>
    el("button", { class: chosen === lab ? "chosen" : null, "data-assignment": lab, onclick: () => giveNug(lab) },
      el("kbd", {}, NUG_KEYS[lab] ? NUG_KEYS[lab][0] : "?"), el("span", {}, NUG[lab] || lab))),
    el("button", { class: chosen === null ? "chosen" : null, onclick: () => giveNug(null) }, el("kbd", {}, "s"), el("span", {}, "skip / unsure")));
  const box = el("div", { class: "label-box" },
    el("div", { class: "controls" }, el("label", {}, "assessor", name),
      el("label", { title: "recorded with your labels: PPI assumes assignments given without the model's" }, review, "review: show the LLM's assignments (this answer; recorded)"),
      el("button", { onclick: exportAssignments }, "export human assignments")),
    el("div", { id: "progress-text" }, `${s.labelled} of ${s.items} nuggets assigned (${s.skipped} skipped); ${s.complete_queries} of ${s.queries} queries complete`),
    el("div", { class: "progress" }, el("div", {})),
    el("div", { class: "muted" }, `answer ${a.index + 1} of ${s.answers} · query ${a.qid} · run ${a.run_id}`),
    el("div", { class: "query-text", id: "query" }, a.query),
    el("div", { class: "passage card", id: "answer-text" }, a.answer || "(no answer text)"),
    el("div", { id: "nuggets" }, items),
    scale,
    el("div", { class: "controls" },
      el("button", { onclick: () => moveAnswer(-1), disabled: a.index <= 0 }, "← previous answer"),
      el("button", { onclick: undoNug }, "undo (u)"),
      el("button", { onclick: () => moveAnswer(1), disabled: a.index >= s.answers - 1 }, "next answer →")),
    el("p", { class: "keys muted" }, "Keys: ", s.labels.flatMap((l) => [el("kbd", {}, NUG_KEYS[l][0]), "/", el("kbd", {}, NUG_KEYS[l][1]), ` ${NUG[l]} · `]),
      el("kbd", {}, "s"), " skip/unsure · ", el("kbd", {}, "u"), " undo · ", el("kbd", {}, "↑"), el("kbd", {}, "↓"), " previous/next nugget · ",
      el("kbd", {}, "←"), el("kbd", {}, "→"), " previous/next answer · ", el("kbd", {}, "r"), " review"));
  box.querySelector(".progress > div").style.width = `${(100 * s.labelled / Math.max(1, s.items)).toFixed(1)}%`;
  const ppi = el("aside", { class: "ppi", id: "ppi" }, el("h2", {}, "PPI estimate"), el("p", { class: "muted" }, "…"));
  const old = document.getElementById("ppi");
  if (old) ppi.replaceChildren(...old.childNodes);
  show(el("h1", {}, "Assign nuggets for PPI"), el("div", { class: "split" }, box, ppi));
}

async function giveNug(assignment) {
  if (N.busy) return;
  N.busy = true;
  try {
    const i = N.index;
    N.state = await api("nuggets/label", { method: "POST", body: { answer: i, nugget: N.cursor, assignment, who: assessor() } });
    // fetched blind (review was recorded once, when turned on); the model's view is kept
    const prev = N.answer;
    N.answer = await api(`nuggets/label/answer/${i}`);
    if (N.review && prev && prev.index === i) N.answer.nuggets.forEach((n, j) => { n.llm = prev.nuggets[j].llm; });
    const open = N.answer.nuggets.findIndex((n, j) => j > N.cursor && !n.label);
    const any = N.answer.nuggets.findIndex((n) => !n.label);
    if (open >= 0) N.cursor = open;
    else if (any >= 0) N.cursor = any;
    else if (N.state.next !== null && N.state.next !== undefined) { N.index = N.state.next; await loadAnswer(); return; }
    renderNugLabel();
    refreshNugPPI();
  } catch (e) { showError(e); } finally { N.busy = false; }
}

async function undoNug() {
  if (N.busy) return;
  N.busy = true;
  try {
    N.state = await api("nuggets/label/undo", { method: "POST", body: { who: assessor() } });
    if (N.state.undone) { N.index = N.state.undone[0]; await loadAnswer(true); N.cursor = N.state.undone[1]; renderNugLabel(); }
    else await loadAnswer(true);
  } catch (e) { showError(e); } finally { N.busy = false; }
}

async function moveAnswer(step) {
  const i = N.index + step;
  if (i < 0 || i >= N.state.answers) return;
  N.index = i;
  await loadAnswer();
}

function onNugKey(ev) {
  if (ev.target && ["INPUT", "SELECT", "TEXTAREA"].includes(ev.target.tagName) && ev.target.type !== "checkbox") return;
  if (ev.ctrlKey || ev.metaKey || ev.altKey || !N.answer) return;
  const k = ev.key;
  const lab = N.state.labels.find((l) => NUG_KEYS[l] && NUG_KEYS[l].includes(k));
  if (lab) { ev.preventDefault(); giveNug(lab); }
  else if (k === "s") { ev.preventDefault(); giveNug(null); }
  else if (k === "u") { ev.preventDefault(); undoNug(); }
  else if (k === "r") { ev.preventDefault(); N.review = !N.review; loadAnswer(true); }
  else if (k === "ArrowDown" || k === "j") { ev.preventDefault(); N.cursor = Math.min(N.answer.nuggets.length - 1, N.cursor + 1); renderNugLabel(); }
  else if (k === "ArrowUp" || k === "k") { ev.preventDefault(); N.cursor = Math.max(0, N.cursor - 1); renderNugLabel(); }
  else if (k === "ArrowLeft") { ev.preventDefault(); moveAnswer(-1); }
  else if (k === "ArrowRight") { ev.preventDefault(); moveAnswer(1); }
}

async function refreshNugPPI() {
  const box = document.getElementById("ppi");
  if (!box) return;
  let r;
  try { r = await api("nuggets/label/ppi"); } catch (e) { box.replaceChildren(el("h2", {}, "PPI estimate"), el("p", { class: "err" }, e.message)); return; }
  const parts = [el("h2", {}, "PPI estimate"),
    el("p", {}, el("strong", {}, "Estimand: "), `each run's mean nugget score "${r.metric}" over all its answers, as human assignments would give it; ${r.method.toUpperCase()}, ${Math.round(100 * r.confidence)}% intervals.`),
    el("p", { class: "muted" }, `${r.complete_queries} of ${r.sampled_queries} sampled queries complete (${r.human_answers} answers).`)];
  if (r.status !== "ok") parts.push(el("p", { class: "muted", id: "ppi-status" }, r.status));
  else {
    parts.push(el("table", { id: "ppi-table" }, el("tr", {}, ["run", "PPI", "interval", "LLM only", "human only"].map((h) => el("th", {}, h))),
      r.estimates.map((e) => el("tr", {}, el("td", {}, e.run), el("td", { class: "num" }, fmt(e.mean)),
        el("td", { class: "num ppi-ci" }, `[${fmt(e.ci[0])}, ${fmt(e.ci[1])}]`),
        el("td", { class: "num" }, fmt(e.llm_only[0]), ci(e.llm_only.slice(1))),
        el("td", { class: "num" }, fmt(e.human_only[0]), ci(e.human_only.slice(1)))))));
    if (r.kendall_tau !== null && r.kendall_tau !== undefined) parts.push(el("p", {}, `Kendall τ of the run orderings (human vs LLM, assessed answers): ${fmt(r.kendall_tau, 3)}`));
  }
  if (r.notes && r.notes.length) parts.push(el("ul", { id: "ppi-notes", class: "notes" }, r.notes.map((n) => el("li", {}, n))));
  parts.push(el("p", { class: "muted" }, r.note));
  box.replaceChildren(...parts);
}

async function exportAssignments() {
  const headers = token() ? { Authorization: "Bearer " + token() } : {};
  const r = await fetch("/ui/api/nuggets/label/assignments", { headers });
  if (!r.ok) { showError(new Error(`export failed: HTTP ${r.status}`)); return; }
  const url = URL.createObjectURL(await r.blob());
  const a = el("a", { href: url, download: "human_assignments.jsonl" });
  document.body.appendChild(a); a.click(); a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
