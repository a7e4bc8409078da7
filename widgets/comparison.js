// BatchingComparison view: its one drawing (seats x time per config, latencies, the ratio)
// is a plotly FigureWidget built in Python (inferlab.lab.drawings.comparison), mounted by
// ilPlot; under it an HTML table of each config's headline numbers (the `sides` trait).
function render({ model, el }) {
  const root = ilEl("div", "il-view il-compare", el);
  ilLive(model, root);
  const box = ilEl("div", "il-plot il-cmp-plot", root);
  ilScrubber(model, root, () => {});
  const table = ilEl("table", "il-cmp-table", root);
  const num = (v, f) => (v === null || v === undefined ? "–" : f(v));
  const fill = () => {
    const rows = [["", "tok/s", "TTFT mean", "E2E p90", "done"]];
    for (const s of model.get("sides")) {
      rows.push([s.label, num(s.throughput, (v) => v.toFixed(1)), num(s.ttft_mean, ilMs),
        num(s.e2e_p90, ilMs), String(s.finished)]);
    }
    table.replaceChildren();
    rows.forEach((r, i) => {
      const tr = ilEl("tr", "", table);
      r.forEach((v) => ilEl(i ? "td" : "th", "", tr, v));
    });
  };
  model.on("change:sides", fill);
  fill();
  return ilPlot(model, root, box, ["sides", "cursor"]);
}

export default { render };
