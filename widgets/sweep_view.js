// SweepView's frontier: its one drawing (the sweep's points, the frontier through the best)
// is a plotly FigureWidget built in Python (inferlab.lab.drawings.frontier), mounted by
// ilPlot. A click on a point sends its number (the trace's customdata) to Python, which
// opens that point's recorded run beside the plot (widgets/sweep_view.py).
function render({ model, el }) {
  const root = ilEl("div", "il-view il-sweep-frontier", el);
  const box = ilEl("div", "il-plot il-sweep-plot", root);
  // plotly makes its plot element when the FigureWidget mounts (again after a resync):
  // listen on each one once
  const hooked = new WeakSet();
  const hook = () => {
    const gd = box.querySelector(".js-plotly-plot");
    if (!gd || hooked.has(gd) || typeof gd.on !== "function") return;
    hooked.add(gd);
    root.dataset.clickable = "1";
    gd.on("plotly_click", (ev) => {
      const p = ev && ev.points && ev.points[0];
      if (!p || p.customdata === undefined || p.customdata === null) return;
      root.dataset.picked = String(p.customdata);
      model.send({ event: "pick", point: Number(p.customdata) });
    });
  };
  const watch = new MutationObserver(hook);
  watch.observe(box, { childList: true, subtree: true });
  const off = ilPlot(model, root, box, ["picked"]);
  return () => { watch.disconnect(); off(); };
}

export default { render };
