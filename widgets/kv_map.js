// KVBlockMap view: the KV map's one drawing, a plotly FigureWidget built in Python
// (inferlab.lab.drawings.kv_map), mounted by ilPlot between the live badge and the scrubber.
function render({ model, el }) {
  const root = ilEl("div", "il-view il-kv-map", el);
  ilLive(model, root);
  const box = ilEl("div", "il-plot il-kv-plot", root);
  ilScrubber(model, root, () => {});
  const shown = () => { root.dataset.shown = String(model.get("shown")); };
  model.on("change:shown", shown);
  shown();
  return ilPlot(model, root, box, ["shown"]);
}

export default { render };
