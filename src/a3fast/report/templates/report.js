// The report's tables: search and paging over the data embedded above, and a placement's detail
// view. Names come from a trace and are put into the page as text only (textContent), never markup.
// The charts are drawn by vega-embed from the Vega-Lite specs embedded beside the data.
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("report-data").textContent);
  const PAGE = { placements: 25, candidates: 50 };

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v; else if (k === "text") node.textContent = v; else node.setAttribute(k, v);
    }
    for (const c of children) if (c != null) node.append(c);
    return node;
  }
  const fmt = (n) => Number(n).toLocaleString("en");
  const pred = (i) => D.predicates[i];

  function pager(host, total, size, page, go) {
    host.replaceChildren();
    const pages = Math.max(1, Math.ceil(total / size));
    const prev = el("button", { text: "‹ previous", "data-testid": "prev" });
    const next = el("button", { text: "next ›", "data-testid": "next" });
    prev.disabled = page <= 0; next.disabled = page >= pages - 1;
    prev.onclick = () => go(page - 1); next.onclick = () => go(page + 1);
    host.append(prev, el("span", { text: `page ${page + 1} of ${fmt(pages)} (${fmt(total)} rows)` }), next);
  }

  // -- placement list ---------------------------------------------------------------------------
  const rowsHost = document.getElementById("placement-rows");
  const pagerHost = document.getElementById("placement-pager");
  const search = document.getElementById("placement-search");
  let shown = D.placements, page = 0, selected = null;

  function placementText(p) {
    return [String(p.seq), p.kind, p.chosen || "unschedulable", ...p.p.map(pred)].join(" ").toLowerCase();
  }
  function drawList() {
    rowsHost.replaceChildren();
    for (const p of shown.slice(page * PAGE.placements, (page + 1) * PAGE.placements)) {
      const outcome = p.chosen != null ? el("span", { class: "chosen", text: p.chosen }) : el("span", { class: "rejected", text: "unschedulable" });
      const tr = el("tr", { "data-seq": p.seq, class: (p.f ? "flagged " : "") + (selected === p ? "selected" : "") },
        el("td", { class: "n", text: String(p.seq) }), el("td", {}, outcome), el("td", { class: "n", text: `${fmt(p.e)}/${fmt(p.n)}` }));
      tr.onclick = () => { location.hash = "seq-" + p.seq; };
      rowsHost.append(tr);
    }
    pager(pagerHost, shown.length, PAGE.placements, page, (n) => { page = n; drawList(); });
  }
  search.addEventListener("input", () => {
    const q = search.value.trim().toLowerCase();
    shown = q ? D.placements.filter((p) => placementText(p).includes(q)) : D.placements;
    page = 0; drawList();
  });

  // -- one placement ----------------------------------------------------------------------------
  const detail = document.getElementById("detail");

  function chart(host, spec, name, values) {
    const full = Object.assign({}, spec, { data: { values: values } });
    window.vegaEmbed(host, full, { actions: false, renderer: "svg", ast: true, defaultStyle: false, tooltip: { disableDefaultStyle: true } }).catch((e) => { host.textContent = "chart: " + e.message; });
  }

  function funnelTable(p) {
    const body = el("tbody");
    let reached = p.n;
    p.p.forEach((i, k) => {
      body.append(el("tr", {}, el("td", { class: "pred", text: pred(i) }), el("td", { class: "n", text: String(reached) }),
        el("td", { class: "n removed", text: String(p.r[k]) })));
      reached -= p.r[k];
    });
    body.append(el("tr", { class: "total" }, el("td", { text: "eligible" }), el("td", { class: "n", text: String(p.e) }), el("td")));
    return el("table", { class: "funnel", "data-testid": "funnel" },
      el("thead", {}, el("tr", {}, el("th", { text: "predicate" }), el("th", { class: "n", text: "reached" }), el("th", { class: "n", text: "removed" }))), body);
  }

  function candidateRows(p) {
    const d = p.d, names = D.lists[d.list], codes = d.ff, labels = p.p.concat(d.x).map(pred);
    const rows = names.map((nameIndex, k) => {
      const c = typeof codes === "string" ? (codes[k] === "." ? -1 : D.codes.indexOf(codes[k])) : codes[k];
      return { name: D.names[nameIndex], failed: c < 0 ? null : labels[c] };
    });
    // eligible first (the chosen one on top), then in candidate order
    const rank = (r) => (r.failed != null ? 2 : r.name === p.chosen ? 0 : 1);
    return rows.map((r, k) => [r, k]).sort((a, b) => rank(a[0]) - rank(b[0]) || a[1] - b[1]).map((x) => x[0]);
  }

  function candidateTable(p) {
    const all = candidateRows(p);
    const box = el("div", { class: "candidates-box" });
    const input = el("input", { type: "search", id: "candidate-search", placeholder: "Find a candidate: agent or predicate", "aria-label": "Find a candidate" });
    const body = el("tbody", { id: "candidate-rows" });
    const pg = el("div", { class: "pager", id: "candidate-pager" });
    let rows = all, at = 0;
    function draw() {
      body.replaceChildren();
      for (const r of rows.slice(at * PAGE.candidates, (at + 1) * PAGE.candidates)) {
        const verdict = r.failed == null ? el("span", { class: r.name === p.chosen ? "chosen" : "eligible", text: r.name === p.chosen ? "chosen" : "eligible" })
          : el("span", { class: "pred", text: r.failed });
        body.append(el("tr", {}, el("td", { text: r.name }), el("td", {}, verdict)));
      }
      pager(pg, rows.length, PAGE.candidates, at, (n) => { at = n; draw(); });
    }
    input.addEventListener("input", () => {
      const q = input.value.trim().toLowerCase();
      rows = q ? all.filter((r) => r.name.toLowerCase().includes(q) || (r.failed || "eligible").toLowerCase().includes(q)) : all;
      at = 0; draw();
    });
    draw();
    const note = all.length < p.n ? `${fmt(all.length)} of ${fmt(p.n)} candidates are kept in this report (the first ${fmt(D.limits.candidates)} in candidate order, at most ${fmt(D.limits.candidates)} of the eligible past them${p.chosen != null ? ", and the chosen agent" : ""}).` : `${fmt(p.n)} candidates.`;
    box.append(el("h3", { text: "Candidates and the first predicate each failed" }), input,
      el("table", { class: "candidates", "data-testid": "candidates" },
        el("thead", {}, el("tr", {}, el("th", { text: "candidate" }), el("th", { text: "first failed predicate" }))), body),
      pg, el("p", { class: "muted", text: note }));
    return box;
  }

  function showPlacement(p) {
    selected = p;
    detail.replaceChildren();
    detail.append(el("h3", { "data-testid": "detail-title", text: `seq ${p.seq} ${p.kind}` + (p.t ? ` — decided at ${p.t}` : "") }));
    if (p.d) detail.append(el("p", { class: "summary", text: p.d.summary }));
    else detail.append(el("p", { class: "muted", text: "Only the funnel is kept for this placement (past the report's limit of placements shown in detail)." }));
    const funnelChart = el("div", { "data-testid": "funnel-chart" });
    detail.append(el("div", { class: "charts-row" }, funnelTable(p), funnelChart));
    let reached = p.n;
    chart(funnelChart, D.specs.funnel, "funnel", p.p.map((i, k) => { const row = { order: k, predicate: pred(i), reached: reached, removed: p.r[k] }; reached -= p.r[k]; return row; }));
    if (p.d) {
      const d = p.d;
      if (d.scores.length) {
        const values = [];
        // each component weighted, so the stack ends at the total (raw when the weights are unknown)
        const weight = (k) => (d.weights ? d.weights[k] : 1);
        d.scores.forEach((row, rank) => d.components.forEach((c, k) => { if (row[k + 2] != null) values.push({ rank: rank, agent: row[0], component: c, value: row[k + 2] * weight(k) }); }));
        const scoresChart = el("div", { "data-testid": "scores-chart" });
        detail.append(scoresChart);
        chart(scoresChart, D.specs.scores, "scores", values);
        if (!d.weights) detail.append(el("p", { class: "muted", text: "Raw components: the totals are no weighted sum of them, so the bars do not end at the totals." }));
        if (d.scored > d.scores.length) detail.append(el("p", { class: "muted", text: `The ${d.scores.length} highest totals of ${fmt(d.scored)} scored agents.` }));
      }
      if (d.reason) detail.append(el("p", { class: "reason", text: "reason: " + d.reason }));
      detail.append(candidateTable(p));
    }
    drawList();
  }

  function fromHash() {
    // seqs may be negative, and past 2^53 they are embedded as strings: compare them as exact text
    const m = /^#seq-(-?\d+)$/.exec(location.hash);
    const key = m ? BigInt(m[1]).toString() : null;
    const p = m ? D.placements.find((x) => String(x.seq) === key) : null;
    if (p) {
      const i = shown.indexOf(p);
      if (i < 0) { shown = D.placements; search.value = ""; }
      page = Math.floor(shown.indexOf(p) / PAGE.placements);
      showPlacement(p);
      detail.scrollIntoView({ block: "start" });
    } else if (m) {
      detail.replaceChildren(el("p", { class: "muted", text: `seq ${m[1]} is not among the placements kept in this report.` }));
    }
  }
  window.addEventListener("hashchange", fromHash);
  drawList();
  if (location.hash) fromHash(); else if (D.placements.length) showPlacement(D.placements[0]);
})();
